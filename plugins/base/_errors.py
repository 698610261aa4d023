"""The one error root for device work, with a `retryable` flag.

Plugins raise these; the controller maps each to exactly one place in the response
(the kind's `error`/`diag_msg`, plus `device_ping_error` when the device could not be reached)
and, at the RPC edge, to one gRPC status. Messages must never contain secrets.
"""

from __future__ import annotations

from typing import Any


class DeviceControllerError(Exception):
    """Root of every devicectl error.

    Args:
        message: a human-readable diagnostic, safe to show to operators.
        retryable: whether repeating the same operation later may succeed.
    """

    retryable: bool = False
    #: short machine-readable code, e.g. for `ErrorInfo.reason` and logs
    code: str = "ERROR"
    #: an out-of-process plugin's receipts (`DeviceWrite`s) that came back with this error; None when
    #: none could (an in-process plugin's are in its write log already)
    receipts: tuple[Any, ...] | None = None

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        return self.message


class InvalidRequestError(DeviceControllerError):
    """The request is malformed or asks for something impossible (e.g. watts out of range)."""

    code = "INVALID_ARGUMENT"


class UnknownDeviceError(DeviceControllerError):
    """The device is neither in the inventory nor described by the request's model JSON."""

    code = "UNKNOWN_DEVICE"


class DeviceUnreachableError(DeviceControllerError):
    """The device (its BMC, or the NVML library) could not be reached."""

    code = "DEVICE_UNREACHABLE"
    retryable = True


class DeviceRejectedError(DeviceControllerError):
    """The device answered and refused the operation; the message carries the device's words."""

    code = "DEVICE_REJECTED"


class DeviceLostError(DeviceControllerError):
    """The device fell off the bus or disappeared; it needs an operator."""

    code = "DEVICE_LOST"


class UnsupportedError(DeviceControllerError):
    """The operation is not supported on this platform or firmware."""

    code = "UNSUPPORTED"


class HostEnvironmentError(DeviceControllerError):
    """The host environment is wrong: missing library or driver, no permission, bad config."""

    code = "ENVIRONMENT"


class DeviceTimeoutError(DeviceControllerError):
    """The operation did not finish before the request's deadline."""

    code = "TIMEOUT"
    retryable = True


class TransientError(DeviceControllerError):
    """A temporary failure (BMC busy, 503, connection reset) that a later attempt may not meet."""

    code = "TRANSIENT"
    retryable = True


__all__ = [
    "DeviceControllerError",
    "DeviceLostError",
    "DeviceRejectedError",
    "DeviceTimeoutError",
    "DeviceUnreachableError",
    "HostEnvironmentError",
    "InvalidRequestError",
    "TransientError",
    "UnknownDeviceError",
    "UnsupportedError",
]
