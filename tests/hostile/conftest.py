"""Fixtures for hostile-input tests: the controller harness of tests/controller and a capture of
the log exactly as an operator would read it (the controller's line format, INFO level)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from controller.observability import logs
from tests.controller.conftest import start_controller  # noqa: F401  (fixtures)


class LogCapture:
    """Formatted log lines written since the fixture started."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def assert_clean(self) -> None:
        """No traceback, and no line an operator could not read at a glance."""
        assert "Traceback" not in self.text, self.text[-4000:]
        longest = max(self.lines, key=len, default="")
        assert len(longest) < 1200, f"a {len(longest)}-character log line: {longest[:300]}"


@pytest.fixture
def log_capture() -> Iterator[LogCapture]:
    capture = LogCapture()
    handler = logs.handler(capture.stream)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield capture
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
