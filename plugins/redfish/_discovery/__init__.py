"""Discovery: which control path a BMC offers, and the URI of every cap and metric resource. `discovery`
picks the platform (from the device model, the `platform` option, or by probing when the model says
`auto`) and lets the platform modules of `plugins.redfish._platforms` build the result; `walk` does
its reads, each resource at most once, a link the BMC cannot serve recorded as absent; `layout` is
the result's data model (`Component`, `Discovery`), the DPS model names and small document helpers,
shared with the platform modules; `evidence` says which resource carries each cap and why (the lines
`devicectl inventory check --login` prints).
"""
