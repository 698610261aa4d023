"""Responses on their way out, and the transports that carry them: the outbox worker that posts each
response in per-device order until it is acknowledged in `outbox`, the writing of each attempt's
outcome (through a database outage, and finished at shutdown) in `records`, what it knows about the
receiver's status codes, back-off and the callback channel in `wire`, agent mode (dial out, requests
and responses on one stream) in `agent`, its server end in `agent_server`, and the topology sink
that receives for tests and demos in `sink`.
"""
