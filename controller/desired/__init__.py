"""Desired state: the limits a successful change leaves in force and how drift from them is judged in
`limits`, the periodic drift check and re-application in `drift`, dry runs that plan a request
without writing in `dryrun`, the receipts of every device write in `receipts`, and what is in
force per component (requested, enforced, allowed range, drift, resource groups) in `in_force`
(docs/desired-state.md).
"""
