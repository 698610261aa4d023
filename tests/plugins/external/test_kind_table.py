"""A request kind added by its row alone: `identify_led` (tests/plugins/external/identify_led_plugin.py)
travels through validation, translation, the dispatcher's rule, `run_operation` and the plugin
protocol's one `Operate` RPC to a plugin process, and back, with nothing changed but the row
registered here, the member messages this test builds and the plugin.

The controller's API oneof is compiled in, so the kind's member is built here as its own message
(`identify_led.proto`, made at run time) and travels alone: the `*_member_*` functions are what the
envelope functions call for every built-in kind.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from controller import translate
from controller.api.checks import Checker
from controller.api.validate import member_problems
from controller.execution.dispatch import Dispatcher, Job, supersedable
from controller.plugin_host.remote import RemotePlugin
from controller.translate.kinds import KindTranslation, registered, translation_of
from plugins.base import (
    DeviceContext,
    InvalidRequestError,
    RequestKind,
    UnsupportedError,
    run_operation,
)
from plugins.base.kinds import KINDS
from tests.memory_plugin import MemoryPlugin
from tests.plugins.external.conftest import MEMORY, serve_command, spec
from tests.plugins.external.identify_led_plugin import (
    IDENTIFY_LED,
    IdentifyLed,
    IdentifyLedResult,
    LedPlugin,
)

# ---- the proto stub: the kind's request and response members ---------------------------------


def _stub() -> tuple[Any, Any]:
    """`IdentifyLedRequest{int32 seconds}` and `IdentifyLedResponse{bool success; string error;
    int32 lit_for}`, as protoc would compile them."""
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="identify_led.proto", package="devicectl.tests", syntax="proto3"
    )
    request = file.message_type.add(name="IdentifyLedRequest")
    request.field.add(name="seconds", number=1, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    response = file.message_type.add(name="IdentifyLedResponse")
    response.field.add(name="success", number=1, type=field.TYPE_BOOL, label=field.LABEL_OPTIONAL)
    response.field.add(name="error", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    response.field.add(name="lit_for", number=3, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("devicectl.tests.IdentifyLedRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("devicectl.tests.IdentifyLedResponse")),
    )


LedRequest, LedResponse = _stub()


# ---- the row ----------------------------------------------------------------------------------


def _check(check: Checker, path: str, member: Any) -> None:
    if not 1 <= member.seconds <= 3600:
        check.add(f"{path}.seconds", f"must be between 1 and 3600, got {member.seconds}")


ROW = KindTranslation(
    IDENTIFY_LED,
    check=_check,
    request_from_proto=lambda member, path: IdentifyLed(seconds=member.seconds),
    request_to_proto=lambda request: LedRequest(seconds=request.seconds),
    result_to_proto=lambda result: LedResponse(success=result.ok, error=result.error, lit_for=result.lit_for),
    result_from_proto=lambda member, path: IdentifyLedResult(member.success, member.error, member.lit_for),
    failure=lambda error, request: LedResponse(success=False, error=error),
    success=lambda member: (member.success, member.error),
)


@pytest.fixture
def identify_led() -> Iterator[KindTranslation]:
    with registered(ROW) as row:
        yield row
    assert "identify_led" not in KINDS  # gone again: the other tests see the built-in table


def ctx(**state: Any) -> DeviceContext:
    return DeviceContext(
        device_id="n1",
        request_id="r1",
        deadline=time.monotonic() + 20,
        model={"max_seconds": 60},
        state=state,
    )


async def test_a_new_kind_runs_through_the_table_to_a_plugin_process_and_back(
    identify_led: KindTranslation, remote
) -> None:
    # validation: the row's check, paths named from the kind
    assert member_problems("identify_led", LedRequest(seconds=0)) == [
        "identify_led.seconds: must be between 1 and 3600, got 0"
    ]
    assert member_problems("identify_led", LedRequest(seconds=30)) == []
    # translation in: the member becomes the kind's domain request
    request = translate.request_member_from_proto("identify_led", LedRequest(seconds=30))
    assert request == IdentifyLed(30)
    assert translate.request_member_to_proto("identify_led", request) == LedRequest(seconds=30)
    # dispatch: a kind that writes is superseded by a newer request of its device; reads are not
    assert supersedable("identify_led") and not supersedable(RequestKind.PING)

    # the plugin, in its own process: the kind crosses `Operate` by name
    command = [sys.executable, "-m", "tests.plugins.external.identify_led_plugin"]
    led: RemotePlugin = await remote(spec("led", command))
    outcome = await run_operation(led, "identify_led", ctx(lit_total=5), request)
    assert outcome.result == IdentifyLedResult(ok=True, lit_for=30)
    assert outcome.state == {"lit_total": 35}
    with pytest.raises(InvalidRequestError, match="at most 60 s"):  # the plugin's error, its class kept
        await run_operation(led, "identify_led", ctx(), IdentifyLed(90))
    # the same plugin in process gives the same outcome
    local = await run_operation(LedPlugin(), "identify_led", ctx(lit_total=5), request)
    assert (local.result, local.state) == (outcome.result, outcome.state)

    # translation out: the result as the kind's response member, and back
    member = translate.result_member_to_proto("identify_led", outcome.result)
    assert member == LedResponse(success=True, lit_for=30)
    assert translate.result_member_from_proto("identify_led", member) == outcome.result
    assert translate.member_success("identify_led", member) == (True, "")
    failed = translate.failed_member("identify_led", "")
    assert failed == LedResponse(success=False, error="identify_led failed")
    assert translate.member_success("identify_led", failed) == (False, "identify_led failed")
    with pytest.raises(TypeError, match="identify_led answers with IdentifyLedResult"):
        translate.result_member_to_proto("identify_led", IdentifyLed(3))


async def test_the_dispatcher_does_not_run_an_overtaken_request_of_the_new_kind(
    identify_led: KindTranslation,
) -> None:
    """The kind writes (its row says so): an older request of it that a newer one of its device
    overtook is handed back, not run; an older read-only request still runs."""
    ran: list[int] = []
    overtaken: list[tuple[int, int]] = []

    async def execute(job: Job) -> None:
        ran.append(job.seq)

    async def on_superseded(job: Job, newer: int) -> None:
        overtaken.append((job.seq, newer))

    dispatcher = Dispatcher(execute, max_concurrency=1, queue_limit=10, on_superseded=on_superseded)

    def job(seq: int, kind: str) -> Job:
        return Job(seq, f"r{seq}", "n1", kind, b"", "", datetime.now(UTC))  # type: ignore[arg-type]

    assert dispatcher.submit(job(5, "identify_led"))
    assert await dispatcher.drain(10)
    assert dispatcher.submit(job(3, "identify_led")) and dispatcher.submit(job(4, RequestKind.PING))
    assert await dispatcher.drain(10)
    assert ran == [5, 4] and overtaken == [(3, 5)]


async def test_a_plugin_without_the_kind_answers_unsupported(identify_led: KindTranslation, remote) -> None:
    """In process the plugin lacks the coroutine; out of process it lacks the row too (a plugin
    process that does not know the kind): both are the same one-line refusal, never a crash."""
    with pytest.raises(UnsupportedError, match="memory: identify_led is not supported"):
        await run_operation(MemoryPlugin(), "identify_led", ctx(), IdentifyLed(3))
    memory: RemotePlugin = await remote(spec("mem", serve_command(MEMORY)))
    with pytest.raises(UnsupportedError, match="unknown request kind 'identify_led'"):
        await run_operation(memory, "identify_led", ctx(), IdentifyLed(3))
    assert memory.connection is not None and memory.restarts == 0  # the process is fine


def test_the_row_is_the_only_registration() -> None:
    """Registering the row is what makes the kind known everywhere; without it, nothing knows it."""
    assert "identify_led" not in KINDS
    with pytest.raises(KeyError, match="unknown request kind 'identify_led'"):
        translation_of("identify_led")
    with registered(ROW):
        assert KINDS["identify_led"] is IDENTIFY_LED and translation_of("identify_led") is ROW
        with pytest.raises(ValueError, match="already"):
            with registered(ROW):
                pass
    assert "identify_led" not in KINDS
    # every built-in kind has both halves of its row
    assert [t.name for t in translate.kinds.translations()] == list(KINDS.names()) == list(RequestKind)
