"""The controller's gRPC front door: the `DeviceController` servicer (validate, journal, acknowledge)
in `service`, the operator-facing `DeviceControllerAdmin` servicer in `admin` and the records it
answers, read from store rows, in `records`, the interceptor that answers undecodable request bytes
`INVALID_ARGUMENT` in `decode`, every validation rule, each error naming its field, in `validate`
(the envelope's) and `checks` (one method per message shape, named by each kind's row),
and the strict parsing of JSON request fields with size and depth limits in `json_fields`.
Inventory labels and the `-l key=value` selectors that pick devices by them are in `selectors`;
lists in pages (the bound on a page and its page tokens) in `pages`. The gRPC server runs on a
thread and event loop of its own, so acks never wait for a wave's execution, in `front_door`
(with what crosses to the execution's loop: accepted requests, the admin API's calls). What
happens to a request once acknowledged is `controller.execution`'s.
"""
