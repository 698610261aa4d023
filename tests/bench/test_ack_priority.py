"""`python -m bench.ack_priority` at tiny size: every ping acked while the execution loop was busy,
the switch interval it was run with applied. Reports figures; asserts none."""

from __future__ import annotations

import asyncio
import re
import sys

from bench import ack_priority


def test_ack_priority_acks_every_ping_while_the_execution_loop_is_busy() -> None:
    before = sys.getswitchinterval()
    try:
        result = asyncio.run(ack_priority.run_once(0.002, count=5, devices=2))
        assert sys.getswitchinterval() == 0.002
    finally:
        sys.setswitchinterval(before)
    assert result.startswith("ack p50 "), result  # the client got all its acks (else "client failed")
    assert re.search(r"busy loop [\d,]+ steps/s", result), result
    assert not re.search(r"busy loop 0 steps/s", result), "the execution loop did no work meanwhile"
