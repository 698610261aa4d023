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


def test_the_last_write_of_a_component_is_what_it_did() -> None:
    writes = [
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", status="error: 412"),
        DeviceWrite(P.format(0), "PATCH", component="GPU 0", status="ok", after=650.0),
    ]
    assert failed_writes_note(writes) == "writes before the failure: GPU 0 written, 650 W read back"
