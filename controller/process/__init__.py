"""This process's life: its role and the executor processes `serve --workers N` starts and supervises
in `workers`, what those executors report to their front end (their delivery state) in `reports`,
background loops kept alive through outages (a failing pass logged once, backed off and retried)
in `supervise`, and the process-wide tuning for thousands of connections (garbage collector, TLS
buffers, malloc arenas) in `runtime`; serve's pruning of old finished rows in `retention`; the
one-writer rule at start (one process per SQLite database, one live process per instance id) in
`writer`.
"""
