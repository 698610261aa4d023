"""Logging with request context: every line carries device, request_id and trace_id when known."""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import UTC, datetime
from typing import IO

#: longest value a log line carries for one untrusted field (ids, errors quoting input)
MAX_LOGGED_CHARS = 200
#: ids in the line prefix: the longest valid id (controller.api.validate.MAX_ID_CHARS) is never clipped
_MAX_ID_CHARS = 256

_context: contextvars.ContextVar[tuple[str, str, str]] = contextvars.ContextVar(
    "devicectl_log", default=("", "", "")
)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        device, request_id, trace_id = _context.get()
        # set before validation, so a rejected request's ids may be anything: clip them here
        record.device = clip(device, _MAX_ID_CHARS) if device else "-"
        record.request_id = clip(request_id, _MAX_ID_CHARS) if request_id else "-"
        record.trace_id = clip(trace_id, _MAX_ID_CHARS) if trace_id else "-"
        return True


def clip(value: object, limit: int = MAX_LOGGED_CHARS) -> str:
    """`value` as text of at most `limit` characters plus a "…(N more)" tail, on one line.

    Every log line that quotes untrusted input goes through this, so a hostile 400 KB field costs
    one short line, and an embedded newline cannot forge a second log record.
    """
    text = str(value)
    if "\n" in text or "\r" in text:
        text = text.replace("\r", "\\r").replace("\n", "\\n")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text) - limit} more)"


class request_context:
    """Tag log lines emitted inside the block (and tasks started from it) with the request.

    NOTE: a class rather than a generator-based context manager: it is entered three times per
    request (ack, run, delivery) and costs a third as much."""

    __slots__ = ("_ids", "_token")

    def __init__(self, device: str, request_id: str, trace_id: str) -> None:
        self._ids = (device, request_id, trace_id)

    def __enter__(self) -> None:
        self._token = _context.set(self._ids)

    def __exit__(self, *exc: object) -> None:
        _context.reset(self._token)


class TextFormatter(logging.Formatter):
    """The text line format, one line per record whatever the message quotes: control characters
    in the message (a BMC's error text with a newline and `CRITICAL ...` after it) are escaped, so
    no text from outside can forge a record. A traceback still follows on its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        if not message.isprintable():
            record.message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and device, request_id and
    trace_id as fields (null outside a request), plus the exception text if any; `instance`
    first when the process is one of several (`serve --workers`, `--role`)."""

    def __init__(self, instance: str = "") -> None:
        super().__init__()
        self._instance = instance

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._instance:
            line["instance"] = self._instance
        for key in ("device", "request_id", "trace_id"):
            value = getattr(record, key, "-")
            line[key] = None if value == "-" else value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


#: log formats of `--log-format`
FORMATS = ("text", "json")


def handler(stream: IO[str] | None = None, fmt: str = "text", instance: str = "") -> logging.Handler:
    """A handler writing the controller's line format (text or JSON, with the request context);
    `instance`: the process's instance id on every line (executors share the front end's output)."""
    if fmt not in FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = logging.StreamHandler(stream)
    out.addFilter(_ContextFilter())
    if fmt == "json":
        out.setFormatter(JsonFormatter(instance))
    else:
        tag = f"instance={instance.replace('%', '%%')} " if instance else ""
        out.setFormatter(
            TextFormatter(
                f"%(asctime)s %(levelname)s {tag}%(name)s device=%(device)s request_id=%(request_id)s "
                "trace_id=%(trace_id)s %(message)s"
            )
        )
    return out


def setup(level: str = "INFO", fmt: str = "text", stream: IO[str] | None = None, instance: str = "") -> None:
    """Configure the root logger once: one line per record, with the request context (and the
    instance id, for a process that is one of several)."""
    root = logging.getLogger()
    root.handlers[:] = [handler(stream, fmt, instance)]
    root.setLevel(level.upper())
    # alembic logs its plugin setup and each migration step at INFO on every start
    for noisy in ("aiohttp.access", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
