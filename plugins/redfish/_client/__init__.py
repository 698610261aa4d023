"""The client: one logged-in Redfish conversation per BMC, and the process's pool of them. `client` is
`BmcClient`, the only code that issues Redfish requests (`AsyncRedfishClient` over the wire's
transport, with login, retries, ETags, tasks and typed errors); `pool` keeps one client per BMC URL
for the whole process, whatever the number of devices behind it, with its connections. Sessions:
`login` opens one Redfish session per BMC on first use, again after a 401 (single flight), and deletes
it at logout; `sessions` finds and deletes the sessions an earlier process left open on a BMC, by
their marker (`session_table`: what one look at the table found, and how a full one is explained);
`session_record` is that marker (`Session.Context`) and the record of the sessions this process's
identity opened, written before a session is used; `uris` checks every URI that comes from
outside (a device state, a `Location`, a listing) before a request goes to it. What the client keeps
and follows: `readbacks`, the last read-back of each resource, standing in for the next pre-write
GET while it is valid; `tasks`, a `202 Accepted` write followed to its end through its Task.
"""
