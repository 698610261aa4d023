"""Verification: is this BMC ready to carry production caps (`devicectl bmc verify`)? Read-only checks
with pass / warn / fail and their evidence, and the optional write cycle. `verify` orders the checks
(reachability, TLS, login and a fresh discovery, the session table, firmware, every cap's range and
read-back latency) and sums them up; `verify_tls` reads the certificate the BMC presents (expiry,
host name, trust) over a connection of its own; `verify_gpus` checks the workload power profiles and
compares the in-band limits the controller passes in with the BMC's; `verify_writes` sets each
writable cap to a safe value, reads it back and restores it exactly.
"""
