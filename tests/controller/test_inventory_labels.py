"""Inventory labels and `-l` selectors, the inventory check that reports every problem at once
(one BMC is one device; a plugin typo beside its table is named as the typo), and the page tokens
and page bound of the admin API's lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.api import pages, selectors
from controller.inventory import InventoryError, load_inventory
from controller.translate import _diag
from plugins.base import WriteOutcome


def device(i: int, extra: str = "", url: str = "") -> str:
    url = url or f"https://10.0.0.{i}"
    return (
        f'[[device]]\nid = "n{i}"\nplugin = "redfish"\nmodel = "DGX_GB200"\n{extra}'
        f'[device.redfish]\nurl = "{url}"\n'
    )


def load(tmp_path: Path, text: str) -> dict:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    return load_inventory(path)


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(InventoryError) as info:
        load(tmp_path, text)
    return str(info.value)


def test_labels_come_from_the_device_over_the_defaults_with_model_and_plugin(tmp_path: Path) -> None:
    text = '[defaults]\nlabels = { row = "b", pdu = "p1" }\n\n'
    text += device(1, 'labels = { rack = "r12", pdu = "p2", "topology.example.com/zone" = 3 }\n') + device(2)
    entries = load(tmp_path, text)
    assert entries["n1"].all_labels() == {
        "plugin": "redfish",
        "model": "DGX_GB200",
        "row": "b",
        "pdu": "p2",
        "rack": "r12",
        "topology.example.com/zone": "3",
    }
    assert entries["n2"].labels == {"row": "b", "pdu": "p1"}
    assert selectors.select(entries.values(), "rack=r12") == ["n1"]
    assert selectors.select(entries.values(), "row==b,rack!=r12") == ["n2"]
    assert selectors.select(entries.values(), "model=DGX_GB200") == ["n1", "n2"]
    assert selectors.select(entries.values(), "") == ["n1", "n2"]


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ('labels = "r12"\n', "`labels` must be a table"),
        ("labels = { rack = true }\n", "label 'rack' must be a string or a whole number"),
        ('labels = { rack = "r 12" }\n', "label rack='r 12': keys and values are letters"),
        ('labels = { "-rack" = "r12" }\n', "label -rack='r12'"),
    ],
)
def test_a_bad_label_is_refused_with_its_device(tmp_path: Path, labels: str, message: str) -> None:
    text = refused(tmp_path, device(1, labels))
    assert "device[0] (n1)" in text and message in text


@pytest.mark.parametrize("text", ["rack", "rack=r1,", "rack=r 1", "=r1", "rack=r1=r2", "rack in (a,b)"])
def test_a_selector_that_does_not_parse_is_one_clear_line(text: str) -> None:
    with pytest.raises(selectors.SelectorError) as info:
        selectors.parse(text)
    assert "is not key=value or key!=value" in str(info.value) and "\n" not in str(info.value)


def test_every_inventory_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        device(1, "modle = 1\n") + device(2, "labels = 3\n") + device(3) + device(3, url="https://10.0.0.9")
    )
    message = refused(tmp_path, text)
    assert message.count("\n") == 3 and "3 problems:" in message, message
    assert "device[0] (n1): unknown key `modle` in [device]; did you mean `model`?" in message
    assert "device[1] (n2): `labels` must be a table" in message
    assert "device[3]: duplicate id 'n3'" in message


def test_two_device_ids_on_one_bmc_url_are_refused(tmp_path: Path) -> None:
    text = device(1, url="https://bmc-7.example:443/") + device(2, url="https://BMC-7.example:443")
    message = refused(tmp_path, text)
    assert "device[1] (n2): url 'https://BMC-7.example:443' is already device 'n1''s" in message
    assert "one BMC is one device" in message
    assert load(tmp_path, device(1) + device(2)).keys() == {"n1", "n2"}  # distinct BMCs pass
    shared = device(1, url="https://10.0.0.5") + 'system = "Node0"\n' + device(2, url="https://10.0.0.5")
    assert load(tmp_path, shared + 'system = "Node1"\n').keys() == {"n1", "n2"}  # one BMC, two nodes


def test_a_plugin_typo_beside_its_table_names_the_plugin_as_the_typo(tmp_path: Path) -> None:
    message = refused(tmp_path, device(1).replace('plugin = "redfish"', 'plugin = "redfsh"'))
    assert "device[0] (n1): unknown plugin 'redfsh'; did you mean 'redfish'" in message, message
    assert "[device.redfsh]" not in message  # not the backwards "did you mean [device.redfsh]?"


def test_a_page_token_belongs_to_its_list_and_a_page_stays_under_its_byte_bound() -> None:
    token = pages.encode("devices", "node0500")
    assert pages.decode("devices", token, str) == "node0500"
    assert pages.decode("devices", "", str) is None
    for kind, bad in (
        ("requests", token),
        ("devices", "not-a-token"),
        ("devices", pages.encode("devices", 5)),
    ):
        with pytest.raises(pages.PageTokenError, match="is not a token of this list"):
            pages.decode(kind, bad, str)
    records = [apb.DeviceRecord(id=f"n{i}", state_json=b"x" * 9000) for i in range(300)]
    page = pages.fill(records)
    assert 100 < len(page) < 300 and sum(r.ByteSize() for r in page) <= pages.PAGE_BYTES
    assert pages.page_size(0, 500) == 500 and pages.page_size(10**9, 500) == pages.MAX_PAGE_ROWS


def test_a_failed_write_never_reads_as_applied() -> None:
    note = _diag.describe("cannot connect", 790, 800, WriteOutcome.NOT_WRITTEN)
    assert note == "cannot connect (requested 790 W, not applied)"
    assert _diag.parse(note, 800, WriteOutcome.NOT_WRITTEN) == ("cannot connect", 790)  # lossless
    unknown = _diag.describe("no reply", 790, 0, WriteOutcome.UNKNOWN)
    assert unknown == "no reply (requested 790 W, not confirmed)" and _diag.parse(
        unknown, 0, WriteOutcome.UNKNOWN
    ) == (
        "no reply",
        790,
    )
    assert _diag.describe("", 701, 700, None) == "requested 701 W, applied 700 W"  # rounded, applied


def test_a_selector_past_its_bounds_is_refused_before_any_work() -> None:
    from controller.api import selectors

    with pytest.raises(selectors.SelectorError, match="at most 1024 characters and 32 requirements"):
        selectors.parse(",".join(["model!=x"] * 2000))
    with pytest.raises(selectors.SelectorError, match="at most"):
        selectors.parse("rack=" + "r" * 2000)
    assert len(selectors.parse(",".join([f"k{i}=v" for i in range(32)]))) == 32


def test_a_crafted_page_token_position_is_refused() -> None:
    import base64
    import json

    from controller.api import pages

    for after in (10**30, -1):
        raw = json.dumps({"list": "requests", "after": after}).encode()
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        with pytest.raises(pages.PageTokenError):
            pages.decode("requests", token, int)
    assert pages.decode("requests", pages.encode("requests", 41), int) == 41
    crafted = base64.urlsafe_b64encode(json.dumps({"list": "devices", "after": "node\x00"}).encode()).decode()
    with pytest.raises(pages.PageTokenError):  # PostgreSQL would refuse it in the page's query
        pages.decode("devices", crafted, str)


def test_a_crafted_newest_first_page_token_is_refused() -> None:
    import base64
    import json
    from datetime import UTC, datetime

    from controller.api import pages

    def token(after: object) -> str:
        return base64.urlsafe_b64encode(json.dumps({"list": "bmc_checks", "after": after}).encode()).decode()

    for after in (
        ["not a time", "b-1"],
        ["2026-12-06T00:00:00", "b-1"],  # no zone: no row is created so
        ["2026-12-06T00:00:00+00:00", "b\x00"],
        ["2026-12-06T00:00:00+00:00"],
        ["2026-12-06T00:00:00+00:00", 7],
        17,
    ):
        with pytest.raises(pages.PageTokenError):
            pages.decode_newest("bmc_checks", token(after))
    when = datetime(2026, 12, 6, tzinfo=UTC)
    good = pages.encode("bmc_checks", pages.newest_position(when, "b-1"))
    assert pages.decode_newest("bmc_checks", good) == (when, "b-1")
    assert pages.decode_newest("verifications", "") is None
