"""devicectl benchmarks: ingest, fleet fan-out and recovery (`python -m bench`; see BENCHMARKS.md).

Every benchmark runs the controller as its own process (`python -m controller serve`), so the CPU
and memory figures are the controller's alone; BMC simulators and the load generator run in
processes of their own, and the topology sink runs in the benchmark process.
"""
