"""A request that fails as a whole (a deadline, an error) says what its writes did before it."""

from __future__ import annotations

from controller.desired.receipts import failed_writes_note, write_outcome
from plugins.base import DeviceWrite, WriteOutcome

P = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_{}/EnvironmentMetrics"


def test_receipts_say_written_not_written_or_unknown() -> None:
    writes = [
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", after=700.0, status="200"),
        DeviceWrite(P.format(1), "PATCH", component="GPU 1", status="error: 500"),
        DeviceWrite(P.format(2), "PATCH", component="GPU 2", status="error: CancelledError"),
        DeviceWrite(P.format(3), "-", component="GPU 3", status="skipped"),
        DeviceWrite(P.format(3), "PATCH", component="GPU 3", status="planned"),
    ]
    assert [write_outcome(w) for w in writes] == [
        WriteOutcome.WRITTEN,
        WriteOutcome.NOT_WRITTEN,
        WriteOutcome.UNKNOWN,
        None,
        None,
    ]
    assert failed_writes_note(writes) == (
        "writes before the failure: GPU 0 written, 700 W read back; GPU 1 not written; "
        "GPU 2 unknown (the BMC's answer never came)"
    )
    assert failed_writes_note(writes[3:]) == ""


def test_a_retry_after_a_refusal_is_what_the_component_did() -> None:
    writes = [
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", status="error: 412"),
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", status="ok", after=650.0),
    ]
    assert failed_writes_note(writes) == "writes before the failure: GPU 0 written, 650 W read back"


def test_a_refusal_after_a_write_never_hides_the_write() -> None:
    """The note never says less than what happened: a later refusal (or an unanswered write)
    does not undo an earlier write on the device."""
    written_then_refused = [
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", status="200", after=600.0),
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", status="error: 400"),
    ]
    assert failed_writes_note(written_then_refused) == (
        "writes before the failure: GPU 0 written, 600 W read back"
    )
    unknown_then_refused = [
        DeviceWrite(P.format(1), "PATCH", component="GPU 1", status="error: TimeoutError"),
        DeviceWrite(P.format(1), "PATCH", component="GPU 1", status="error: 400"),
    ]
    assert failed_writes_note(unknown_then_refused) == (
        "writes before the failure: GPU 1 unknown (the BMC's answer never came)"
    )


def test_one_component_of_several_writes_is_unknown_if_any_is() -> None:
    of_all = WriteOutcome.of_all
    assert of_all([WriteOutcome.NOT_WRITTEN, WriteOutcome.WRITTEN]) is WriteOutcome.WRITTEN
    assert of_all([WriteOutcome.WRITTEN, WriteOutcome.UNKNOWN]) is WriteOutcome.UNKNOWN
    assert of_all([WriteOutcome.NOT_WRITTEN]) is WriteOutcome.NOT_WRITTEN
    assert of_all([]) is WriteOutcome.NOT_WRITTEN


def test_a_gateways_answer_leaves_a_write_unknown_until_read_back() -> None:
    """502/503/504 came from a gateway that gave up: the device may have applied the write."""
    writes = [
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", status="error: 504"),
        DeviceWrite(P.format(1), "PATCH", component="GPU 1", status="error: 502"),
        DeviceWrite(P.format(2), "PATCH", component="GPU 2", after=400.0, status="ok (read back; HTTP 504)"),
    ]
    unknown, written = WriteOutcome.UNKNOWN, WriteOutcome.WRITTEN
    assert [write_outcome(w) for w in writes] == [unknown, unknown, written]
    assert failed_writes_note(writes) == (
        "writes before the failure: GPU 0 unknown (the BMC's answer never came); "
        "GPU 1 unknown (the BMC's answer never came); GPU 2 written, 400 W read back"
    )
