"""Redfish messages as a real BMC words them: the `#Message` entry, the error and success bodies that
carry them, and the Base messages of a rejected request body (a property or an action parameter),
which `_errors.bad_request` gathers into one 400. Clients match `MessageId`s by suffix, so the
registry prefix is a single constant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: registry prefix of every Base message this simulator emits
BASE = "Base.1.18.1."

JsonDict = dict[str, Any]


def message(
    message_id: str,
    text: str,
    args: Sequence[str] = (),
    *,
    severity: str = "Warning",
    resolution: str = "None.",
    related: Sequence[str] = (),
) -> JsonDict:
    """Build one `#Message.v1_1_1.Message` entry."""
    entry: JsonDict = {
        "@odata.type": "#Message.v1_1_1.Message",
        "MessageId": message_id,
        "Message": text,
        "MessageArgs": list(args),
        "MessageSeverity": severity,
        "Resolution": resolution,
    }
    if related:
        entry["RelatedProperties"] = list(related)
    return entry


def error_body(messages: Sequence[JsonDict]) -> JsonDict:
    """Wrap messages into a Redfish error body."""
    if len(messages) == 1:
        code, text = messages[0]["MessageId"], messages[0]["Message"]
    else:
        code = BASE + "GeneralError"
        text = "A general error has occurred. See Resolution for information on how to resolve the error."
    return {"error": {"code": code, "message": text, "@Message.ExtendedInfo": list(messages)}}


def success_body() -> JsonDict:
    """The body of an action or PATCH that succeeded without returning a resource."""
    return {
        "@Message.ExtendedInfo": [
            message(BASE + "Success", "The request completed successfully.", severity="OK")
        ]
    }


def property_unknown(prop: str) -> JsonDict:
    """Message for a property the resource does not have."""
    return message(
        BASE + "PropertyUnknown",
        f"The property {prop} is not in the list of valid properties for the resource.",
        [prop],
        resolution="Remove the unknown property from the request body and resubmit the request if the "
        "operation failed.",
        related=[_pointer(prop)],
    )


def property_not_writable(prop: str) -> JsonDict:
    """Message for a read-only property in a PATCH."""
    return message(
        BASE + "PropertyNotWritable",
        f"The property {prop} is a read-only property and cannot be assigned a value.",
        [prop],
        resolution="Remove the property from the request body and resubmit the request if the operation "
        "failed.",
        related=[_pointer(prop)],
    )


def property_value_type_error(value: object, prop: str) -> JsonDict:
    """Message for a value of the wrong JSON type."""
    shown = _show(value)
    return message(
        BASE + "PropertyValueTypeError",
        f"The value '{shown}' for the property {prop} is not a type that the property can accept.",
        [shown, prop],
        resolution="Correct the value for the property in the request body and resubmit the request if "
        "the operation failed.",
        related=[_pointer(prop)],
    )


def property_value_not_in_list(value: object, prop: str) -> JsonDict:
    """Message for an enum value the property does not allow."""
    shown = _show(value)
    return message(
        BASE + "PropertyValueNotInList",
        f"The value '{shown}' for the property {prop} is not in the list of acceptable values.",
        [shown, prop],
        resolution="Choose a value from the enumeration list that the implementation can support and "
        "resubmit the request if the operation failed.",
        related=[_pointer(prop)],
    )


def property_value_out_of_range(value: object, prop: str, low: int, high: int) -> JsonDict:
    """Message for a set point outside [AllowableMin, AllowableMax]; names the limits."""
    shown = _show(value)
    return message(
        BASE + "PropertyValueOutOfRange",
        f"The value '{shown}' for the property {prop} is not in the supported range of acceptable "
        f"values (AllowableMin {low}, AllowableMax {high}).",
        [shown, prop],
        resolution=f"Correct the value for the property to be within {low} and {high} and resubmit the "
        "request if the operation failed.",
        related=[_pointer(prop)],
    )


def property_value_incorrect(prop: str, value: object) -> JsonDict:
    """Message for a value the service refuses for another reason."""
    shown = _show(value)
    return message(
        BASE + "PropertyValueIncorrect",
        f"The property {prop} with the requested value of {shown} could not be written because the "
        "value does not meet the constraints of the implementation.",
        [prop, shown],
        resolution="No resolution is required.",
        related=[_pointer(prop)],
    )


def property_missing(prop: str) -> JsonDict:
    """Message for a required property that is absent."""
    return message(
        BASE + "PropertyMissing",
        f"The property {prop} is a required property and must be included in the request.",
        [prop],
        resolution="Ensure that the property is in the request body and has a valid value and resubmit "
        "the request if the operation failed.",
        related=[_pointer(prop)],
    )


def action_parameter_unknown(action: str, param: str) -> JsonDict:
    """Message for a parameter the action does not take."""
    return message(
        BASE + "ActionParameterUnknown",
        f"The action {action} was submitted with the invalid parameter {param}.",
        [action, param],
        resolution="Correct the invalid parameter and resubmit the request if the operation failed.",
    )


def action_parameter_missing(action: str, param: str) -> JsonDict:
    """Message for a required action parameter that is absent."""
    return message(
        BASE + "ActionParameterMissing",
        f"The action {action} requires the parameter {param} to be present in the request body.",
        [action, param],
        severity="Critical",
        resolution="Supply the action with the required parameter in the request body when the request "
        "is resubmitted.",
    )


def action_parameter_value_error(value: object, action: str) -> JsonDict:
    """Message NVIDIA bmcweb returns for an unparsable `ProfileMask`."""
    shown = _show(value)
    return message(
        BASE + "ActionParameterValueError",
        f"The value for the parameter {shown} in the action {action} is invalid.",
        [shown, action],
        resolution="Correct the invalid parameter and resubmit the request if the operation failed.",
    )


def _pointer(prop: str) -> str:
    # RelatedProperties are JSON pointers; "PowerLimitWatts/SetPoint" -> "#/PowerLimitWatts/SetPoint"
    return "#/" + prop.lstrip("#/")


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
