"""Logging with request context: every line carries device, request_id and trace_id when known."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager

_context: contextvars.ContextVar[tuple[str, str, str]] = contextvars.ContextVar(
    "devicectl_log", default=("", "", "")
)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        device, request_id, trace_id = _context.get()
        record.device = device or "-"
        record.request_id = request_id or "-"
        record.trace_id = trace_id or "-"
        return True


@contextmanager
def request_context(device: str, request_id: str, trace_id: str) -> Iterator[None]:
    """Tag log lines emitted inside the block (and tasks started from it) with the request."""
    token = _context.set((device, request_id, trace_id))
    try:
        yield
    finally:
        _context.reset(token)


def setup(level: str = "INFO") -> None:
    """Configure the root logger once: one line per record, with the request context."""
    handler = logging.StreamHandler()
    handler.addFilter(_ContextFilter())
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s device=%(device)s request_id=%(request_id)s "
            "trace_id=%(trace_id)s %(message)s"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "alembic.runtime.migration"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
