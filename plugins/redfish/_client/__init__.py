"""The client: one logged-in Redfish conversation per BMC, and the process's pool of them. `client` is
`BmcClient`, the only code that issues Redfish requests (`AsyncRedfishClient` over the wire's
transport, with login, retries, ETags, tasks and typed errors); `pool` keeps one client per BMC URL
for the whole process, whatever the number of devices behind it, with its connections. Sessions are
the client's too: it opens one Redfish session per BMC on first use, again after a 401 (single
flight), deletes it at logout, and finds and deletes the sessions an earlier process left open on a
BMC, by their marker; `session_table` is that marker (`Session.Context`), what one look at the table
found, and how a full one is explained; the identity's record of the sessions this process opened is
`plugins.base.identity`'s. `uris` checks every URI that comes from outside (a device state, a
`Location`, a listing) before a request goes to it. What the client keeps and follows: `readbacks`,
the last read-back of each resource, standing in for the next pre-write GET while it is valid;
`tasks`, a `202 Accepted` write followed to its end through its Task.
"""
