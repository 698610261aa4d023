"""The wire: bytes to a BMC and back, and what a reply means. `http` is devicectl's lean HTTP/1.1
client for BMCs (kept-alive connections per BMC, TLS, one reply timer per BMC), `tls_sessions`
its TLS session resumption (each BMC's last session offered on its next connection), `http_connection`
one kept-alive connection (a request's bytes out, its reply parsed, RFC 9112, within bounds),
`http_failures` what can go wrong with a request (`sent`: whether it may have reached the BMC),
`inflate` a gzip or deflate body undone as it arrives, `redirect` what a 3xx may make a read do
(never a write); `transport` is the per-BMC transport `AsyncRedfishClient` and a logged-in
`BmcClient` send through, `slots` a BMC's connection slots (at most `limit` requests at once, the
rest in arrival order). What a reply means: `errors` holds the typed errors and the one mapping
from an HTTP reply to them, `error_body` reads a BMC's error body and `Retry-After`, `retry` says
when a request is tried again and what its error says when it gives up, and `document` is a
resource as read (and JSON read within a nesting bound), `off_loop` decodes a large reply in
worker threads so it never stalls the event loop. `telemetry` registers the
`devicectl_bmc_*` Prometheus metrics of these calls and sessions; `dmtf` is the one adapter to
DMTF's `redfish.aio` (its public interface only: the only module that builds its client).
"""
