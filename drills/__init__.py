"""Reliability drills: real processes (controller, BMC simulators, topology sink) under faults.

    python -m drills                 # every drill at reduced size
    python -m drills crash outage    # some of them
    python -m drills --full          # the sizes whose figures go in docs/reliability.md

Each drill prints a table and the run writes one JSON result (`--out`). See docs/reliability.md.
"""
