"""Supervision: a plugin process that dies or hangs is restarted, and no request is lost or stuck."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.delivery.sink import TopologySink
from controller.plugin_host.launch import ExternalPlugin
from controller.plugin_host.remote import RemotePlugin
from plugins.base import (
    RELINQUISHED,
    DeviceContext,
    DeviceTimeoutError,
    Empty,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    TransientError,
)
from tests.plugins.external.conftest import (
    CHILD_ENV,
    MEMORY,
    device_table,
    plugin_table,
    serve_command,
    spec,
)

R = pb.DeviceControllerRequest


async def until(predicate, timeout: float = 30.0) -> None:
    """Wait (bounded) for a condition another task brings about."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_kill_mid_batch_restarts_and_answers_every_request_once(
    controller, sink: TopologySink, tmp_path: Path
) -> None:
    devices = [f"node{i:03d}" for i in range(4)]
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(
        plugin_table(MEMORY, serve_command(MEMORY))
        + "".join(device_table(d, MEMORY, model={"Model": "DGX_GB200", "delay": 2.0}) for d in devices)
    )
    h = await controller(inventory)
    batch = [(d, f"{d}-r{n}") for n in range(3) for d in devices]
    for device, rid in batch:
        await h.stub.SendDeviceRequest(R(device=device, request_id=rid, ping=R.PingRequest()))
    await until(lambda: MEMORY in h.controller.plugins.started())  # started on first use
    plugin = h.controller.plugins.started()[MEMORY]
    assert isinstance(plugin, RemotePlugin)
    conn = plugin.connection
    assert conn is not None and conn.process is not None
    old_pid = conn.process.pid

    # Kill while the second round's calls (2 s each) are in flight: wait for the first round's
    # completions in the journal and the second round's jobs in the runner, not for deliveries
    # (whose timing is not the point here), then give the calls a moment to reach the plugin.
    first = {f"{d}-r0" for d in devices}
    deadline = time.monotonic() + 60
    while True:
        views = [await h.controller.store.get_request(rid) for rid in first]
        done = all(v is not None and v.status == "completed" for v in views)
        if done and sum(h.controller.runner.running_shards.values()) == len(devices):
            break
        assert time.monotonic() < deadline, "the first round did not complete"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    os.kill(old_pid, signal.SIGKILL)
    await sink.wait_for({rid for _, rid in batch}, timeout=90)

    results = {rid: translate.success_of(sink.unique()[rid]) for _, rid in batch}
    failed = {rid: error for rid, (ok, error) in results.items() if not ok}
    assert failed, "the requests running at the kill must be answered with an error"
    assert len(failed) <= len(devices), "only the requests in flight at the crash may fail"
    for error in failed.values():
        assert "went away" in error and "may be retried" in error, error
    # every device's last request ran on the restarted process
    assert all(results[f"{d}-r2"] == (True, "") for d in devices)
    assert set(sink.counts.values()) == {1}, "exactly one response per accepted request"
    assert plugin.restarts == 1
    new = plugin.connection
    assert new is not None and new.process is not None and new.process.pid != old_pid

    await h.stub.SendDeviceRequest(R(device="node000", request_id="later", ping=R.PingRequest()))
    await sink.wait_for({"later"}, timeout=30)
    assert translate.success_of(sink.unique()["later"]) == (True, "")


def ctx(device: str, seconds: float) -> DeviceContext:
    return DeviceContext(device_id=device, deadline=time.monotonic() + seconds, model={"Model": "DGX_GB200"})


async def test_a_hung_plugin_times_requests_out_and_is_restarted(remote) -> None:
    plugin: RemotePlugin = await remote(
        spec("mem", serve_command(MEMORY)), health_interval=0.3, health_timeout=0.3, health_failures=2
    )
    assert (await plugin.ping(ctx("n1", 10), Ping())).result.ok
    conn = plugin.connection
    assert conn is not None and conn.process is not None
    os.kill(conn.process.pid, signal.SIGSTOP)  # alive, but answers nothing
    try:
        with pytest.raises(DeviceTimeoutError, match="did not answer"):
            await plugin.ping(ctx("n1", 1.0), Ping())
        await until(lambda: plugin.restarts == 1)
    finally:
        if conn.process.returncode is None:
            os.kill(conn.process.pid, signal.SIGKILL)
    assert "health checks" in plugin.last_error
    assert (await plugin.ping(ctx("n1", 10), Ping())).result.ok


async def test_a_call_in_flight_when_the_supervisor_closes_the_channel_fails_as_went_away(remote) -> None:
    """Why the kill-mid-batch test above failed now and then (2 in ~40 runs).

    When a plugin dies, two things race: the dead socket fails the calls in flight (UNAVAILABLE,
    answered "went away"), and the supervisor, told by the process's exit, closes the channel,
    which gRPC turns into a local cancellation of the calls still on it: `CancelledError` in a
    task nobody cancelled. That escaped into the device's lane and ended it: the request was
    neither answered nor failed, ran again after the next sweep and succeeded, so a kill could
    leave no failed request at all (a SIGKILL of 4 calls: 28 of 80 calls cancelled, 20 runs).
    Here the close comes first for certain: the plugin is alive, sleeping in the call, when its
    channel is closed exactly as the supervisor closes it.
    """
    # no health check meets the closed channel before the process is killed below
    plugin: RemotePlugin = await remote(spec("mem", serve_command(MEMORY)), health_interval=60)
    conn = plugin.connection
    assert conn is not None and conn.process is not None
    model = {"Model": "DGX_GB200", "delay": 5}
    slow = DeviceContext(device_id="n1", deadline=time.monotonic() + 30, model=model)
    call = asyncio.create_task(plugin.ping(slow, Ping()))
    await asyncio.sleep(0.3)  # the call reached the plugin, which sleeps 5 s in it
    await conn.channel.close()
    await asyncio.wait({call}, timeout=10)
    assert call.done() and not call.cancelled(), "the call escaped as a cancellation"
    error = call.exception()
    assert isinstance(error, TransientError), error
    assert "went away" in str(error) and "may be retried" in str(error), error
    os.kill(conn.process.pid, signal.SIGKILL)  # now the supervisor restarts it as after a crash
    await until(lambda: plugin.restarts == 1)
    assert (await plugin.ping(ctx("n1", 10), Ping())).result.ok


async def test_requests_wait_for_a_restart_within_their_deadline(remote) -> None:
    plugin: RemotePlugin = await remote(spec("mem", serve_command(MEMORY)), min_backoff=0.5)
    conn = plugin.connection
    assert conn is not None and conn.process is not None
    os.kill(conn.process.pid, signal.SIGKILL)
    await until(lambda: plugin.connection is None)  # the supervisor saw it die
    # a request arriving while the plugin restarts waits for it and runs
    assert (await plugin.ping(ctx("n1", 20), Ping())).result.ok
    assert plugin.restarts == 1


async def test_a_request_whose_deadline_ends_before_the_restart_gets_a_retryable_error(remote) -> None:
    plugin: RemotePlugin = await remote(spec("mem", serve_command(MEMORY)), min_backoff=5.0)
    conn = plugin.connection
    assert conn is not None and conn.process is not None
    os.kill(conn.process.pid, signal.SIGKILL)
    await until(lambda: plugin.connection is None)
    with pytest.raises(TransientError, match="is not running") as info:
        await plugin.ping(ctx("n1", 0.2), Ping())
    assert info.value.retryable


async def test_a_busy_plugin_that_keeps_answering_is_not_restarted(remote) -> None:
    """Health checks answered late while calls keep finishing: busy, not hung."""
    busy = "tests.plugins.external.busy_plugin:BusyPlugin"
    plugin: RemotePlugin = await remote(
        spec("busy", serve_command(busy)), health_interval=0.2, health_timeout=0.1, health_failures=2
    )
    for _ in range(12):  # each call blocks the plugin's event loop for 0.3 s: health checks time out
        assert (await plugin.ping(ctx("n1", 10), Ping())).result.ok
    assert plugin.restarts == 0 and plugin.last_error == ""


async def test_a_cancellation_escaping_the_plugin_fails_only_that_request(remote) -> None:
    plugin: RemotePlugin = await remote(
        spec("busy", serve_command("tests.plugins.external.busy_plugin:BusyPlugin"))
    )
    with pytest.raises(TransientError, match="cancelled inside the plugin"):
        await plugin.std_metrics(ctx("n1", 10), Empty())
    assert (await plugin.ping(ctx("n1", 10), Ping())).result.ok and plugin.restarts == 0


@pytest.mark.slow
async def test_calls_waiting_behind_a_blocked_plugin_are_not_cancelled_by_grpc(remote) -> None:
    """gRPC cancels calls its server has not picked up within 30 s unless told otherwise: the calls
    that arrive while the plugin's loop is blocked must wait (within their deadline) and run."""
    busy = "tests.plugins.external.busy_plugin:BusyPlugin"
    plugin: RemotePlugin = await remote(spec("busy", serve_command(busy)), health_timeout=60.0)

    async def ping(device: str, after: float) -> bool:
        await asyncio.sleep(after)
        return (await plugin.ping(ctx(device, 100), Ping())).result.ok

    results = await asyncio.gather(ping("hog", 0), *(ping(f"n{i}", 1.0) for i in range(40)))
    assert all(results)


async def test_a_dialed_plugin_that_restarts_is_dialed_again(remote, tmp_path: Path) -> None:
    """`address` plugins are run by someone else (e.g. root on the node): the host only redials."""
    sock = tmp_path / "files.sock"
    (tmp_path / "a.txt").write_text("x")

    def serve_by_hand() -> subprocess.Popen[str]:
        command = [*serve_command("filedevices"), "--manual", "--address", f"unix:{sock}"]
        proc = subprocess.Popen(command, env={**os.environ, **CHILD_ENV}, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().startswith("1|2|unix|")
        return proc

    first = serve_by_hand()
    try:
        plugin: RemotePlugin = await remote(
            ExternalPlugin(name="files", address=f"unix:{sock}", config={"dir": str(tmp_path)}),
            health_interval=0.2,
            health_timeout=0.2,
            health_failures=2,
            min_backoff=0.1,
        )
        assert (await plugin.ping(DeviceContext(device_id="a.txt"), Ping())).result.ok
    finally:
        first.kill()
        first.wait()
    await until(lambda: plugin.connection is None)
    second = serve_by_hand()
    try:
        await until(lambda: plugin.restarts == 1)
        assert (await plugin.ping(DeviceContext(device_id="a.txt"), Ping())).result.ok
    finally:
        second.terminate()
        second.wait()


async def test_a_call_that_starts_after_the_plugin_died_waits_for_the_restart(remote, tmp_path: Path) -> None:
    """The kill-mid-batch test's other failure (1 in 27 runs once the first was fixed): a
    device's next request started between the plugin's death and the supervisor noticing it,
    and gRPC failed it at once, unsent ("failed to connect to all addresses"); it was answered
    "went away" as if it had been running. A call that never reached the plugin waits for the
    restart and runs. Made certain here with a dialed plugin and slow health checks: its server
    is gone, the channel has no connection, and the supervisor has not noticed yet."""
    sock = tmp_path / "files.sock"
    (tmp_path / "a.txt").write_text("x")

    def serve_by_hand() -> subprocess.Popen[str]:
        command = [*serve_command("filedevices"), "--manual", "--address", f"unix:{sock}"]
        proc = subprocess.Popen(command, env={**os.environ, **CHILD_ENV}, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().startswith("1|2|unix|")
        return proc

    first = serve_by_hand()
    second: subprocess.Popen[str] | None = None
    try:
        plugin: RemotePlugin = await remote(
            ExternalPlugin(name="files", address=f"unix:{sock}", config={"dir": str(tmp_path)}),
            health_interval=1.0,
            health_timeout=0.2,
            health_failures=2,
            min_backoff=0.1,
        )
        conn = plugin.connection
        assert conn is not None
        first.kill()
        first.wait()
        await until(lambda: conn.channel.get_state() is grpc.ChannelConnectivity.TRANSIENT_FAILURE)
        assert plugin.connection is conn, "the supervisor has not noticed yet"
        call = asyncio.create_task(
            plugin.ping(DeviceContext(device_id="a.txt", deadline=time.monotonic() + 30), Ping())
        )
        # the call failed unsent and now waits for the restart; the new process on the same address
        # answers the old channel's health checks too, but gets the call only once configured
        await until(lambda: plugin._gone is conn)
        second = serve_by_hand()
        assert (await call).result.ok
        assert plugin.restarts == 1
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait()


async def test_a_cancelled_writing_call_ends_its_shielded_work_before_the_devices_next_call_runs(
    remote, tmp_path: Path
) -> None:
    """The host gives up on a writing call (its deadline) while the plugin's shielded work (a write
    cycle's restore) still writes the device: the host's next writing call of that device, its own
    restore say, waits in the plugin process until that work has ended, never writing beside it. A
    call of another device does not wait."""
    busy = "tests.plugins.external.busy_plugin:BusyPlugin"
    plugin: RemotePlugin = await remote(spec("busy", serve_command(busy)))
    events = tmp_path / "events"
    change = PolicyChange(PolicyAction.SET, Policy("P", ()))

    def call(device: str, request_id: str, seconds: float) -> DeviceContext:
        model = {"Model": "DGX_GB200", "events": str(events)}
        return DeviceContext(
            device_id=device, request_id=request_id, deadline=time.monotonic() + seconds, model=model
        )

    first = asyncio.create_task(plugin.set_policy(call("n1", "first", 0.5), change))  # cut in its restore
    await asyncio.sleep(0.7)
    other = asyncio.create_task(plugin.set_policy(call("n2", "other", 10), change))
    assert (await plugin.set_policy(call("n1", "next", 10), change)).result.ok
    assert (await other).result.ok
    with pytest.raises(DeviceTimeoutError):
        await first
    lines = events.read_text().splitlines()
    assert lines.index("end first") < lines.index("start next"), lines
    assert lines.index("start other") < lines.index("end first"), lines  # another device: no wait


def _busy_calls(
    events: Path,
) -> tuple[PolicyChange, Callable[[str, float], DeviceContext], Callable[[], list[str]]]:
    """The busy plugin's `set_policy` change, a call context of device n1 (request id, seconds to
    its deadline) and the lines its calls noted so far."""

    def call(request_id: str, seconds: float) -> DeviceContext:
        model = {"Model": "DGX_GB200", "events": str(events)}
        deadline = time.monotonic() + seconds
        return DeviceContext(device_id="n1", request_id=request_id, deadline=deadline, model=model)

    def lines() -> list[str]:
        return events.read_text().splitlines() if events.exists() else []

    return PolicyChange(PolicyAction.SET, Policy("P", ())), call, lines


@pytest.mark.parametrize("given_up_by", ["its deadline", "a plain cancel"])
async def test_a_writing_call_given_up_ends_on_the_host_only_once_its_shielded_work_has(
    remote, tmp_path: Path, given_up_by: str
) -> None:
    """The host gives up on a writing call (its deadline, a plain cancel) while the plugin process
    still runs the work it shields (a write cycle's restore): as a call in process, it ends on the
    host only once that work has ended there (`Settle`), so the caller holds the device, and its
    shard lease, until the plugin process no longer writes it."""
    plugin: RemotePlugin = await remote(
        spec("busy", serve_command("tests.plugins.external.busy_plugin:BusyPlugin"))
    )
    change, call, lines = _busy_calls(tmp_path / "events")
    if given_up_by == "its deadline":
        with pytest.raises(DeviceTimeoutError):
            await plugin.set_policy(call("first", 0.5), change)
    else:
        first = asyncio.create_task(plugin.set_policy(call("first", 10), change))
        await until(lambda: "start first" in lines())
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
    assert lines() == ["start first", "end first"], lines()


async def test_a_lapse_while_a_given_up_call_settles_cuts_its_shielded_work_in_the_plugin_process(
    remote, tmp_path: Path
) -> None:
    """A writing call past its deadline waits on the host for the plugin's shielded work to end;
    the cancel that hands the device on (`RELINQUISHED`) meanwhile is told to the plugin process
    (`Relinquish`), which cuts that work: it never ends beside the device's next holder."""
    plugin: RemotePlugin = await remote(
        spec("busy", serve_command("tests.plugins.external.busy_plugin:BusyPlugin"))
    )
    change, call, lines = _busy_calls(tmp_path / "events")
    first = asyncio.create_task(plugin.set_policy(call("cut", 0.3), change))
    await asyncio.sleep(0.8)  # past its deadline: the 1.5 s "restore" still runs in the plugin
    assert not first.done()
    first.cancel(RELINQUISHED)
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(1.5)
    assert lines() == ["start cut"], lines()


async def test_a_relinquished_writing_call_cuts_its_shielded_work_in_the_plugin_process(
    remote, tmp_path: Path
) -> None:
    """A cancel that hands the device on (`RELINQUISHED`: the controller's shard lease lapsed)
    reaches the plugin process, though a gRPC cancel carries no reason (`Relinquish`): the work
    the call shields (a write cycle's restore) is cut there too, instead of going on beside the
    device's next holder; the device's next call no longer waits for it."""
    busy = "tests.plugins.external.busy_plugin:BusyPlugin"
    plugin: RemotePlugin = await remote(spec("busy", serve_command(busy)))
    events = tmp_path / "events"
    change = PolicyChange(PolicyAction.SET, Policy("P", ()))

    def call(request_id: str) -> DeviceContext:
        model = {"Model": "DGX_GB200", "events": str(events)}
        deadline = time.monotonic() + 10
        return DeviceContext(device_id="n1", request_id=request_id, deadline=deadline, model=model)

    def lines() -> list[str]:
        return events.read_text().splitlines() if events.exists() else []

    first = asyncio.create_task(plugin.set_policy(call("cut"), change))
    await until(lambda: "start cut" in lines())
    first.cancel(RELINQUISHED)
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await plugin.set_policy(call("next"), change)).result.ok
    # the next call did not wait out the cut one's 1.5 s "restore", which never ended
    assert lines()[:2] == ["start cut", "start next"], lines()
    await asyncio.sleep(2.0)
    assert "end cut" not in lines(), lines()
