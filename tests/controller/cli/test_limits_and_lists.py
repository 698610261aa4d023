"""Limits and lists that must not mislead, each run as the operator meets it: `devicectl` processes against
a controller on a real port driving a simulated GB200 BMC over HTTPS (tests/controller/cli/test_in_force.py's
site), with a second inventory node that nothing has reached."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatorFleet
from controller.cli._lists import PAGE_ROWS
from controller.inventory import load_inventory
from controller.store import BmcCheckRow
from tests.controller.cli.test_operator import Site
from tests.controller.terminal import pipe

#: verifications journaled two hours ago (`--since 1h` leaves them out)
OLD = 25
NEVER = "node900"  # in the inventory, never reached: nothing listens at its URL


@pytest.fixture
async def site(tmp_path: Path, sink: Any, start_controller: Any) -> AsyncIterator[Site]:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        text = inventory.read_text().replace('model = "', 'labels = { rack = "r1" }\nmodel = "', 1)
        text += f'\n[[device]]\nid = "{NEVER}"\nplugin = "redfish"\nmodel = "DGX_GB200"\n'
        text += 'labels = { rack = "r2" }\n[device.redfish]\nurl = "https://127.0.0.1:9"\n'
        inventory.write_text(text)
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        yield Site(f"127.0.0.1:{h.controller.port}", fleet.bmcs[0], h, sink)
        await h.controller.stop()


async def _cli(site: Site, *args: str) -> Any:
    return await asyncio.to_thread(pipe, *site.cli(*args))


async def test_an_unreachable_bmc_claims_no_limit_in_force_nor_applied(site: Site) -> None:
    sent = await _cli(site, "send", "gpu-policies", "--device", "node001", "--gpu", "0=800", "--wait")
    assert sent.code == 0, sent.out + sent.err
    await site.bmc.stop()  # nothing listens: the BMC is unreachable
    failed = await _cli(site, "send", "gpu-policies", "--device", "node001", "--gpu", "0=790", "--wait")
    print(failed.out, failed.err)
    assert failed.code == 1
    assert "800 W in force" not in failed.out and "applied 800 W" not in failed.out, failed.out
    assert "not written" in failed.out or "unknown" in failed.out, failed.out


def _component(limits_json: str, device: str, component: str) -> dict[str, Any]:
    (row,) = [d for d in json.loads(limits_json) if d["id"] == device]
    return next(c for c in row["in_force"]["components"] if c["component"] == component)


async def test_a_removed_cap_reads_no_cap_requested_and_what_the_bmc_enforces(site: Site) -> None:
    for value in ("480", "none"):
        sent = await _cli(
            site, "send", "gpu-policies", "--device", "node001", "--gpu", f"0={value}", "--wait"
        )
        assert sent.code == 0, sent.out + sent.err
    limits = await _cli(site, "devices", "limits", "-o", "json")
    gpu0 = _component(limits.out, "node001", "gpu/0")
    print(gpu0)
    table = await _cli(site, "devices", "limits", "-o", "csv")
    print(table.out)
    assert gpu0["requested"] is None, gpu0  # removed: nothing requested, not the BMC's default
    assert gpu0["enforced"] is not None, gpu0  # what the BMC reads back is shown, never blank
    (row,) = [r for r in csv.DictReader(io.StringIO(table.out)) if r["component"] == "gpu/0"]
    assert row["requested"] == "none" and row["enforced"] not in ("", "unknown"), row


async def test_gpu_caps_sent_without_a_resource_group_show_no_empty_group(site: Site) -> None:
    activate = await _cli(
        site,
        "send",
        "rg-activate",
        "--device",
        "node001",
        "--resource-group",
        "rg-prod",
        "--gpu",
        "1=500",
        "--wait",
    )
    assert activate.code == 0, activate.out + activate.err
    sent = await _cli(site, "send", "gpu-policies", "--device", "node001", "--gpu", "0=480", "--wait")
    assert sent.code == 0, sent.out + sent.err
    wide = await _cli(site, "devices", "list", "-o", "csv", "-l", "rack=r1")
    (row,) = list(csv.DictReader(io.StringIO(wide.out)))
    assert row["resource groups"] == "rg-prod", row
    shown = await _cli(site, "devices", "show", "node001", "-o", "json")
    assert json.loads(shown.out)["in_force"]["resource_groups"] == ["rg-prod"]


async def test_devices_limits_lists_every_inventory_node_with_unknown_and_why(site: Site) -> None:
    limits = await _cli(site, "devices", "limits", "-o", "csv", "--no-headers")
    assert limits.code == 0, limits.err
    rows = list(csv.reader(io.StringIO(limits.out)))
    never = [r for r in rows if r[0] == NEVER]
    assert len(never) == 1 and never[0][1:4] == ["-", "", "unknown"], never
    assert "never read" in never[0][-1], never
    (unread,) = [r for r in rows if r[0] == "node001"]
    assert unread[1:4] == ["-", "", "unknown"] and "never read" in unread[-1], unread
    # a verification reads every cap: a node never read nor capped then shows what its BMC reported
    verified = await _cli(site, "verify", "node001")
    assert verified.code == 0, verified.out + verified.err
    after = await _cli(site, "devices", "limits", "-o", "csv")
    by_component = {
        r["component"]: r for r in csv.DictReader(io.StringIO(after.out)) if r["device"] == "node001"
    }
    gpu0 = by_component["gpu/0"]
    assert gpu0["requested"] == "" and gpu0["enforced"] and gpu0["min"] and gpu0["max"], gpu0
    assert gpu0["note"].startswith("read by verify "), gpu0
    # a metrics read keeps every cap it read (what the drift check compares): nothing requested
    read = await _cli(site, "send", "std-metrics", "--device", "node001", "--wait")
    assert read.code == 0, read.out + read.err
    again = await _cli(site, "devices", "limits", "-o", "csv")
    mine = [r for r in csv.DictReader(io.StringIO(again.out)) if r["device"] == "node001"]
    assert len(mine) > 1 and all(r["requested"] == "" and r["enforced"] for r in mine), mine
    picked = await _cli(site, "devices", "limits", "-l", "rack=r2", "-o", "name")
    assert picked.out.splitlines() == [f"device/{NEVER}"]


async def _checks(site: Site, count: int) -> None:
    """`count` finished verifications, as the checker leaves them (journaled directly); the first
    OLD two hours ago."""
    now = datetime.now(UTC)
    rows = [
        BmcCheckRow(
            check_id=f"batch0-{i:04d}",
            batch_id="batch0",
            device="node001" if i % 2 else NEVER,
            write_cycle=False,
            status="done",
            verdict="pass",
            query={},
            result={"verdict": "pass", "checks": []},
            writes=None,
            error="",
            owner="",
            created_at=now - timedelta(hours=2 if i < OLD else 0, seconds=count - i),
            started_at=now - timedelta(seconds=count - i),
            finished_at=now - timedelta(seconds=count - i),
        )
        for i in range(count)
    ]
    await site.harness.controller.store.add_bmc_checks(rows)


async def test_verify_list_has_the_list_flags_and_says_when_rows_were_left_out(site: Site) -> None:
    await _checks(site, 51)
    default = await _cli(site, "verify", "list")
    assert default.code == 0, default.err
    assert len([line for line in default.out.splitlines() if "batch0-" in line]) == 50
    assert (
        default.err.strip() == "showing the first 50 verifications; more match: raise --limit or give --all"
    )
    every = await _cli(site, "verify", "list", "--all", "-o", "name")
    assert every.err == "" and len(every.out.splitlines()) == 51
    assert every.out.splitlines()[0] == "verification/batch0-0050"  # newest first
    bare = await _cli(site, "verify", "list", "--all", "--no-headers", "-o", "csv")
    assert len(bare.out.splitlines()) == 51 and "device" not in bare.out.splitlines()[0]
    recent = await _cli(site, "verify", "list", "--since", "1h", "--all", "-o", "name")
    assert len(recent.out.splitlines()) == 51 - OLD, recent.out
    rack = await _cli(site, "verify", "list", "--all", "-l", "rack=r2", "-o", "name")
    assert len(rack.out.splitlines()) == 26  # the even ones are node900's


async def test_verify_list_all_asks_for_pages_as_large_as_every_list_s(site: Site) -> None:
    """`--all` pages by the largest page every list asks for, not by the 50 rows of `--limit`'s
    default: 120 verifications come in one page (the store's reads are counted as they pass)."""
    await _checks(site, 120)
    store = site.harness.controller.store
    asked: list[int] = []
    real = store.list_bmc_checks

    async def counted(**query: Any) -> Any:
        asked.append(query["limit"])
        return await real(**query)

    store.list_bmc_checks = counted  # type: ignore[method-assign]
    try:
        every = await _cli(site, "verify", "list", "--all", "-o", "name")
    finally:
        del store.list_bmc_checks
    assert every.code == 0 and len(every.out.splitlines()) == 120, every.err
    assert asked == [PAGE_ROWS + 1], asked  # one page (and one row more: whether another follows)
    limited = await _cli(site, "verify", "list", "--limit", "7", "-o", "name")
    assert len(limited.out.splitlines()) == 7


async def test_verify_help_shows_run_and_its_choices_and_refuses_two_choices(site: Site) -> None:
    shown = await _cli(site, "verify", "--help")
    assert "run" in shown.out and "--all" in shown.out and "--write-cycle" in shown.out, shown.out
    both = await _cli(site, "verify", "--all", "node001")
    assert both.code == 2 and both.err.count("\n") == 1, both.err
    assert "give one of NODE..., --all, --model or -l" in both.err
    picked = await _cli(site, "verify", "-l", "rack=r1", "--no-wait", "-o", "json")
    assert picked.code == 0, picked.out + picked.err
    assert [c["device"] for c in json.loads(picked.out)] == ["node001"]
    nothing = await _cli(site, "verify", "-l", "rack=r9", "--no-wait")
    assert nothing.code == 2 and "selects no inventory device" in nothing.err, nothing.err


async def test_send_with_a_selector_shows_the_node_count_first_and_plans_each(site: Site) -> None:
    plan = await _cli(site, "send", "ping", "-l", "rack=r1", "--dry-run")
    assert plan.code == 0, plan.out + plan.err
    assert plan.out.splitlines()[0] == "DRY RUN: nothing was written. 1 node selected by 'rack=r1':"
    assert "node001" in plan.out
    none = await _cli(site, "send", "ping", "-l", "rack=r9", "--dry-run")
    assert none.code == 2 and "selects no inventory node; nothing was sent" in none.err
    sent = await _cli(site, "send", "ping", "-l", "rack=r1", "--request-id", "fleet", "--wait", "-o", "json")
    assert sent.code == 0, sent.out + sent.err
    assert json.loads(sent.out) == {
        "selected": 1,
        "requests": [{"device": "node001", "request_id": "fleet-node001", "outcome": "ok", "error": ""}],
    }
