"""Several controllers on one database: which process runs each device, by shards leased with fencing
tokens, in `shards`, and which journaled requests this process claims and queues, and when, in
`claims` (docs/architecture.md, "Several controllers").
"""
