"""The controller's gRPC front door: the `DeviceController` servicer (validate, journal, acknowledge)
in `service`, the operator-facing `DeviceControllerAdmin` servicer in `admin`, the interceptor that
answers undecodable request bytes `INVALID_ARGUMENT` in `decode`, every validation rule, each error
naming its field, in `validate`, and the strict parsing of JSON request fields with size and depth
limits in `json_fields`. What happens to a request once acknowledged is `controller.execution`'s.
"""
