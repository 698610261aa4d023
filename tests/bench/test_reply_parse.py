"""`bench.reply_parse` runs, and compares this tree's reply parser with another file's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reply_parse import main as reply_parse
from plugins.redfish._wire import http_connection as _http_connection


def test_reply_parse_alternates_with_another_parser(capsys: pytest.CaptureFixture[str]) -> None:
    other = str(Path(_http_connection.__file__))  # itself: the comparison works, whatever the figures
    assert reply_parse(["--calls", "20", "--rounds", "2", "--against", other]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["content-length", "two", "chunked"]
    for line in lines:
        assert "against" in line and "this tree" in line and "this tree ÷ against" in line
