"""What the controller tells operators about itself: Prometheus metrics in `metrics` (each BMC's
reachability gauges in `reachability`), the HTTP endpoint
that serves them with `/healthz` and `/readyz` in `endpoint`, log lines that carry the request's
context in `logs`, gRPC health (readiness follows the journal, liveness the process) in `health`,
the installed version in `version`, and the redaction of secrets, tokens, passwords and private keys
from what a support bundle carries in `redact`.
"""
