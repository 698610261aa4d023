"""Readiness verification of devices before they carry production caps (`devicectl verify`):
`checker` journals each device's verification in the database, runs it in the background through
the device's plugin (`bmc_health`: read-only checks, and an optional write cycle holding the
device's lane), reports what a restart interrupted, and records every check with its evidence;
`render` shapes the results for the admin API and the CLI (table, JSON, progress)."""
