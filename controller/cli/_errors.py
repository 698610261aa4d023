"""One-line errors with exit codes (2: usage or bad input, 1: a failure) instead of tracebacks
(`--debug` shows the traceback), shared by every command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

#: output formats of `-o/--output` (`--json` is `-o json`; `wide`: a table with every column, uncut;
#: `name`: KIND/ID per row of a list; `csv`: every column as CSV, for spreadsheets and awk)
OUTPUTS = ("table", "wide", "json", "yaml", "name", "csv")
#: the ones that print tables (or lines) rather than a JSON document
TABULAR = ("table", "wide", "name", "csv")


class UsageError(ValueError):
    """Bad flags or input: exit code 2."""


class NotFoundError(LookupError):
    """What the command names does not exist (an unknown request, device): exit code 1."""


def explain(exc: BaseException, args: Any = None) -> tuple[str, int] | None:
    """A one-line message and exit code for an error a user can act on; None for a real bug."""
    from plugins.base import DeviceControllerError

    if isinstance(exc, grpc.RpcError):
        return rpc_error(exc, getattr(args, "server", "")), rpc_exit_code(exc)
    if isinstance(exc, UsageError):
        return str(exc), 2
    if isinstance(exc, NotFoundError):
        return str(exc), 1
    if isinstance(exc, DeviceControllerError):
        return str(exc), 1
    try:
        from sqlalchemy import exc as sa_exc
    except ImportError:  # pragma: no cover
        sa_exc = None  # type: ignore[assignment]
    if sa_exc is not None:
        if isinstance(exc, sa_exc.ArgumentError | sa_exc.NoSuchModuleError):
            return f"bad database URL: {_first_line(exc)}", 2
        if isinstance(exc, sa_exc.DBAPIError):
            return f"cannot use the database: {_first_line(exc.orig or exc)}", 1
    if isinstance(exc, OSError | ValueError):
        return str(exc), 2
    return None


#: refusals caused by how the command was called (credentials, role, input): exit 2, like usage
_CALLER_CODES = (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
)


def rpc_exit_code(exc: grpc.RpcError) -> int:
    code = exc.code() if hasattr(exc, "code") else None
    if code in _CALLER_CODES or (code is grpc.StatusCode.UNAVAILABLE and _tls_mismatch(_details(exc))):
        return 2
    return 1


def rpc_error(exc: grpc.RpcError, server: str, what: str = "controller") -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = _details(exc)
    if code is grpc.StatusCode.UNAVAILABLE and _tls_mismatch(details):
        return (
            f"UNAVAILABLE: {server} closed the connection (TLS on one side only? "
            f"see --ca-cert, --cert, --key): {_first_line(details)}"
        )
    if code is grpc.StatusCode.UNAVAILABLE and _refused(details):
        return f"{what} not running at {server} (or not reachable): {_first_line(details)}"
    if code is grpc.StatusCode.UNIMPLEMENTED and "method not found" in details.lower():
        # gRPC's bare "Method not found!": something answers there, but not the controller's API
        return (
            f"{server} is not a devicectl controller: it answers gRPC but not the controller's API "
            "(the topology sink, say); check --server"
        )
    name = code.name if code is not None else "error"
    return f"{name}: {_first_line(details)}"


def _details(exc: grpc.RpcError) -> str:
    return str(exc.details() if hasattr(exc, "details") else exc) or ""


def _refused(details: str) -> bool:
    text = details.lower()
    return any(s in text for s in ("connection refused", "dns resolution", "unreachable", "no route"))


def _tls_mismatch(details: str) -> bool:
    text = details.lower()
    return any(s in text for s in ("socket closed", "handshake", "ssl", "certificate", "tls"))


def _first_line(value: object) -> str:
    lines = str(value).strip().splitlines()
    return lines[0] if lines else type(value).__name__


def check_sqlite_directory(url: str, *, create: bool = True) -> None:
    """Refuse a SQLite path in a directory that does not exist when creating it would take more
    than one new directory (`sqlite:////nonexistent/dir/x.db`, a typo, used to be created
    silently), or at all for commands that only read (`create=False`). One new level, like the
    default `var/`, is still created by `serve` and `db upgrade`."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url in (prefix, "sqlite://", f"{prefix}:memory:"):
        return
    path = Path(url[len(prefix) :].split("?", 1)[0])
    if path.parent.is_dir() or (create and path.parent.parent.is_dir()):
        return
    raise UsageError(f"database directory {path.parent} does not exist (create it first): {url}")
