"""Who may talk to the controller, and with what: TLS for every gRPC endpoint (plaintext only on
loopback, certificates reloaded) in `tls`, roles from client certificates in `authz`, a local test
CA in `certs`, and credentials looked up by name at use and handed out only for the URL they are
bound to in `secrets` (docs/security.md).
"""
