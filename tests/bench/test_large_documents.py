"""`bench.large_documents` runs and reports both ways of decoding (its figures are not checked:
timings belong to the benchmark, not to tests)."""

from __future__ import annotations

import pytest

from bench.large_documents import main


def test_large_documents_reports_inline_and_off_loop(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mib", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "document:" in out and "inline: decode" in out and "off the loop: decode" in out
