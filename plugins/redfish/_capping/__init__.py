"""Capping: the power-policy request kinds and how one cap change is written safely. `operations` turns
allocations, topology policy and GPU policies into per-component caps on top of a platform (element
watts split across the devices of that type); `caps` writes one component's cap: read, validate,
write, read back, with the ETag, 412 and NVIDIA 0x600 handling every mechanism shares;
`bounds` the range a cap must fall in (the BMC's, else the spec's, else a floor); `outcome` says
what the write attempts of one change did on the BMC (written, not written, or unknown); `priors`
picks which of our read-backs an operation offers instead of a fresh pre-write GET; `results` builds
the response of a batch (per-element and per-GPU results, failure summaries); `profiles` enables,
disables, restores and verifies NVIDIA workload power profiles per GPU. The mechanisms themselves
(which resource, which body) are `plugins.redfish._platforms`'.
"""
