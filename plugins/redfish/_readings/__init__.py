"""Readings: what a BMC reports of power, energy, limits and temperature, and the streams that carry
them. `metrics` reads node and per-GPU/CPU power, energy, limits and temperature from the sources a
discovery found (`EnvironmentMetrics`, a `Control`'s sensor, the legacy `Power` resource), in that
order of preference, and keeps the raw documents; `streams` serves the Nomad-shaped fingerprint and
stats streams (inventory, health and readings of every target) from the in-process discovery cache.
"""
