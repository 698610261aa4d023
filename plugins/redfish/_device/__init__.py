"""The device: what one operation works on, and the state the controller keeps for it. `device`
prepares everything one operation needs (the pooled client, the state read and checked, the
discovery, cached or fresh) and records the session it used; `op_bmc` is the BMC as one operation
sees it: the client, the request's deadline and reachability, and `OpBmc._write`, through which every
write of the plugin goes (a receipt for each, or a plan in a dry run); `state` is the device state
JSON the controller persists (`ctx.state` in, `Outcome.state` out); `schema` checks that state and the
device model, both untrusted, before any device code runs, and migrates older versions; `entity`
runs the two-phase entity modification after an address, credential or platform change.
"""
