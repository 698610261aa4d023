"""The gRPC server's own thread and loop (controller/api/front_door.py): acks while the execution
loop runs nothing, requests handed over in order, the admin API run on the execution loop, the
health servicer's watchers told from the execution loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.api.front_door import FrontDoor, Handover, OnLoop
from tests.controller.api.test_service import ping
from tests.controller.conftest import memory_inventory
from tests.memory_plugin import MemoryPlugin


async def test_an_ack_is_given_while_the_execution_loop_runs_nothing(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(2))
    acked = threading.Event()
    errors: list[BaseException] = []

    def send() -> None:
        try:
            with grpc.insecure_channel(f"127.0.0.1:{h.controller.port}") as channel:
                dgrpc.DeviceControllerStub(channel).SendDeviceRequest(ping("node001", "fd-1"), timeout=20)
            acked.set()
        except BaseException as exc:
            errors.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    # Block the execution loop (this test's) until the ack arrives: with the server on this loop
    # the ack could never be given, and the wait would end only at its limit.
    given = acked.wait(20)
    sender.join(20)
    assert not errors, errors
    assert given, "no ack while the execution loop was blocked"
    assert not any(call[1] == "fd-1" for call in MemoryPlugin.calls), "run before this loop ran again"
    view = await h.controller.store.get_request("fd-1")
    assert view is not None and view.device == "node001"
    # once the loop runs again the request runs, answered exactly once
    await sink.wait_for({"fd-1"}, timeout=10)
    await asyncio.sleep(0.3)
    assert sink.counts["fd-1"] == 1
    assert sink.unique()["fd-1"].ping.success


async def test_admin_calls_run_on_the_execution_loop_and_their_aborts_reach_the_caller(
    start_controller,
) -> None:
    h = await start_controller(memory_inventory(1))
    status = await h.admin.GetStatus(empty_pb2.Empty())
    assert status.journal_ok
    try:
        await h.admin.GetDevice(apb.GetDeviceRequest(id="no-such-node"))
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND
        assert "no-such-node" in (exc.details() or "")
    else:
        raise AssertionError("GetDevice of an unknown device answered")


async def test_every_abort_on_the_execution_loop_reaches_its_caller_without_a_traceback(
    start_controller, caplog
) -> None:
    h = await start_controller(memory_inventory(1))

    async def missing(i: int) -> grpc.StatusCode:
        try:
            await h.admin.GetRequest(apb.GetRequestRequest(request_id=f"never-sent-{i}"))
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(missing(i) for i in range(300)))
    assert set(codes) == {grpc.StatusCode.NOT_FOUND}
    assert "Traceback" not in caplog.text and "different loop" not in caplog.text


async def test_a_health_watcher_on_the_server_loop_hears_the_stop(start_controller) -> None:
    h = await start_controller(memory_inventory(1))
    stub = health_pb2_grpc.HealthStub(h.channel)
    name = "devicecontroller.v1.DeviceController"
    watch = stub.Watch(health_pb2.HealthCheckRequest(service=name))
    first = await watch.read()
    assert first.status == health_pb2.HealthCheckResponse.SERVING
    # set from this loop (the execution's) while the watcher waits on the server's loop
    await h.controller.health.set(serving=False)
    second = await asyncio.wait_for(watch.read(), 10)
    assert second.status == health_pb2.HealthCheckResponse.NOT_SERVING
    watch.cancel()


async def test_a_wait_streams_from_the_execution_loop_until_the_request_completes(start_controller) -> None:
    h = await start_controller(memory_inventory(1, delay=0.3))
    await h.stub.SendDeviceRequest(ping("node000", "wait-1"))
    records = [r async for r in h.admin.WaitRequest(apb.WaitRequestRequest(request_id="wait-1"))]
    assert records and records[-1].status == apb.COMPLETED
    assert [r.request_id for r in records] == ["wait-1"] * len(records)
    try:
        async for _ in h.admin.WaitRequest(apb.WaitRequestRequest(request_id="never-sent")):
            raise AssertionError("a record of a request never sent")
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND
    else:
        raise AssertionError("the wait for a request never sent ended without NOT_FOUND")


class _Recorder:
    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def Method(self, request: Any, context: Any) -> Any:
        self.loops.append(asyncio.get_running_loop())
        return request * 2

    async def Stream(self, request: Any, context: Any) -> Any:
        for i in range(request):
            self.loops.append(asyncio.get_running_loop())
            yield i

    def plain(self) -> str:
        return "plain"


async def test_on_loop_runs_each_method_and_stream_on_its_loop_and_leaves_other_attributes_alone() -> None:
    here = asyncio.get_running_loop()
    door = FrontDoor()
    door.start()
    try:
        recorder = _Recorder()
        proxy = OnLoop(recorder, here)
        # called on the front door's loop, as the gRPC server would
        assert await door.call(proxy.Method(21, None)) == 42
        assert recorder.loops == [here]
        assert proxy.plain() == "plain"

        async def consume() -> list[int]:
            return [i async for i in proxy.Stream(3, None)]

        assert await door.call(consume()) == [0, 1, 2]
        assert recorder.loops == [here] * 4
    finally:
        await door.stop()


async def test_a_stream_cancelled_while_its_next_item_is_made_ends_as_cancelled() -> None:
    # a caller that goes away while the execution loop makes the next item (WaitRequest's wait)
    here = asyncio.get_running_loop()
    ended = asyncio.Event()

    class Waits:
        async def Stream(self, request: Any, context: Any) -> Any:
            try:
                yield "first"
                await asyncio.Event().wait()  # the next item never comes
                yield "never"
            finally:
                ended.set()

    door = FrontDoor()
    door.start()
    try:
        proxy = OnLoop(Waits(), here)
        got: list[str] = []
        first = asyncio.Event()  # set on the front door's loop, awaited there

        async def consume() -> str:
            try:
                async for item in proxy.Stream(None, None):
                    got.append(item)
                    first.set()
            except asyncio.CancelledError:
                return "cancelled"
            return "ended"

        async def consume_then_cancel() -> str:
            task = asyncio.ensure_future(consume())
            await first.wait()
            await asyncio.sleep(0.05)  # the second item is being made on the execution loop
            task.cancel()
            return await task

        assert await door.call(consume_then_cancel()) == "cancelled"
        await asyncio.wait_for(ended.wait(), 10)  # the stream itself was ended on its loop
        assert got == ["first"]
    finally:
        await door.stop()


async def test_handover_keeps_the_order_and_holds_a_job_until_it_is_taken() -> None:
    taken: list[str] = []
    handover: Handover[str] = Handover(asyncio.get_running_loop(), taken.append, key=str)

    def give() -> None:
        for i in range(0, 100, 2):
            handover.give([f"r{i}", f"r{i + 1}"])

    giver = threading.Thread(target=give)
    giver.start()
    giver.join()  # this loop has run nothing yet: everything is still held
    assert taken == [] and handover.holds("r0") and handover.holds("r99")
    await asyncio.sleep(0)
    assert taken == [f"r{i}" for i in range(100)]
    assert not handover.holds("r0") and not handover.holds("r99")


async def test_a_job_that_cannot_be_queued_does_not_strand_the_next(caplog) -> None:
    taken: list[str] = []

    def take(job: str) -> None:
        if job == "bad":
            raise ValueError("lane gone")
        taken.append(job)

    handover: Handover[str] = Handover(asyncio.get_running_loop(), take, key=str)
    handover.give(["a", "bad", "b"])
    await asyncio.sleep(0)
    assert taken == ["a", "b"]
    assert "could not be queued (it stays journaled)" in caplog.text and "lane gone" in caplog.text
    assert "Traceback" not in caplog.text


def test_a_handover_to_a_closed_loop_leaves_the_jobs_journaled(caplog) -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    handover: Handover[str] = Handover(loop, lambda job: None, key=str)
    handover.give(["r1"])
    assert not handover.holds("r1")
    assert "stay journaled for a restart" in caplog.text
