"""Running what was acknowledged: per-device lanes in journal order under a global limit in `dispatch`,
one job to exactly one completion in `runner`, the device's entry, plugin, model, state and
credentials in `resolve`, a new state's JSON text and its change against the stored one in
`state_text`, completion writes retried in place in the device's lane (each with the device
access it made) in `completions`, the follow-up checks plugins ask for in `verifier`, a write cycle
as a journaled transaction (plan, journal, apply, restore) in `write_cycle`, shadow mode (plan,
record and answer every request, write nothing) in `shadow`, and the background read of every
device at start (login, discovery) in `warmup`.
"""
