"""Following a `202 Accepted` write to its end: the Task resource, its state, status and messages.

What bmcweb does (read from its public source): the 202 carries the Task in its body (`@odata.id`
`/redfish/v1/TaskService/Tasks/{id}`), `Location: /redfish/v1/TaskService/TaskMonitors/{id}` and
`Retry-After: 30`. The monitor answers 202 while the task runs, 204 exactly once after it ended,
whether it completed, failed or was cancelled, and 404 after that; the outcome is only on the Task
resource (`TaskState`, `TaskStatus`, `Messages`). NVIDIA's DPS proxy allows `TaskService/Tasks/*`
but not the monitors (dps.md §7). So the plugin polls the Task resource when the 202 names one,
the monitor otherwise, and reads the Task resource once the monitor says "ended".

A task that ends `Exception`, `Killed`, `Cancelled` or `Interrupted`, or with `TaskStatus:
Critical`, is a failed write carrying the BMC's messages. Polls follow `Retry-After`, except when
waiting that long would pass the request's deadline: then the plugin polls every
`task_poll_interval` instead, and says so in the message if the deadline still passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Protocol

from redfish.aio.response import AsyncRestResponse

from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire.document import Document, loads
from plugins.redfish._wire.errors import (
    DeadlineExceededError,
    ProtocolError,
    TaskFailedError,
    parse_retry_after,
)


class TaskClient(Protocol):
    """What the poller uses of `plugins.redfish._client.client.BmcClient` (which calls the poller, so
    this module names a protocol, not the class)."""

    @property
    def origin(self) -> str: ...

    @property
    def settings(self) -> ConnectionSettings: ...

    async def call(
        self, method: str, path: str, body: Any = None, *, deadline: float, allow_404: bool = False
    ) -> AsyncRestResponse: ...

    async def read_document(self, path: str, reply: AsyncRestResponse) -> Document: ...


TASKS_PREFIX = "/redfish/v1/TaskService/Tasks/"
_DONE_OK = frozenset({"Completed"})
_FAILED = frozenset({"Exception", "Killed", "Cancelled", "Interrupted"})
_FAILED_STATUS = frozenset({"Critical"})


async def wait_task(
    client: TaskClient, accepted: AsyncRestResponse, method: str, path: str, *, deadline: float
) -> None:
    """Poll until the task of a `202 Accepted` ends; raise `TaskFailedError` when it failed."""
    body = _json(accepted)
    task_uri = _task_uri(body)
    monitor = accepted.getheader("Location") or str(body.get("TaskMonitor") or "") or task_uri
    if not monitor:
        raise ProtocolError(f"{client.origin}: {method} {path}: 202 Accepted without a task monitor")
    target = task_uri or monitor
    where = f"{client.origin}: {method} {path}: task {task_uri or monitor}"
    reply = accepted
    shortened: float | None = None
    while True:
        asked = parse_retry_after(reply.getheader("Retry-After"))
        wait = asked if asked is not None else client.settings.task_poll_interval
        left = deadline - time.monotonic()
        # a poll needs time after its wait too: keep as much again for the GET itself
        if 2 * wait >= left:
            # NOTE: bmcweb always asks for 30 s; a request with less left polls sooner rather than
            # failing before its first look (the message says so if the deadline passes anyway)
            if asked is not None and asked > client.settings.task_poll_interval:
                shortened = asked
            wait = client.settings.task_poll_interval
            if 2 * wait >= left:
                raise DeadlineExceededError(
                    f"{where} had not finished when the request's deadline passed" + _note(shortened)
                )
        await asyncio.sleep(wait)
        try:
            reply = await client.call("GET", target, deadline=deadline, allow_404=True)
        except DeadlineExceededError:
            raise DeadlineExceededError(
                f"{where} had not finished when the request's deadline passed" + _note(shortened)
            ) from None
        if reply.status in (204, 404) and target == monitor and task_uri == "":
            return  # the monitor says "ended" and no Task resource is known: the read-back decides
        if reply.status in (204, 404):
            if target == monitor and task_uri:
                target = task_uri
                reply = await client.call("GET", target, deadline=deadline, allow_404=True)
            if reply.status in (204, 404):
                return  # the task is gone: the read-back after the write is the proof
        if reply.status == 202:
            continue
        task = (await client.read_document(target, reply)).body
        state = str(task.get("TaskState") or "")
        status = str(task.get("TaskStatus") or "OK")
        if state in _FAILED or status in _FAILED_STATUS:
            raise TaskFailedError(f"{where} ended {state or 'with an error'} ({status}): {messages(task)}")
        if state in _DONE_OK or not state:
            return


def messages(task: Mapping[str, Any]) -> str:
    """The task's `Messages`, one line."""
    texts = []
    for item in task.get("Messages") or ():
        if isinstance(item, Mapping) and item.get("Message"):
            texts.append(f"{item.get('MessageId', '')}: {item['Message']}".lstrip(": "))
    return "; ".join(texts) or "no message"


def _task_uri(body: Mapping[str, Any]) -> str:
    uri = body.get("@odata.id")
    if isinstance(uri, str) and uri.startswith(TASKS_PREFIX):
        return uri.rstrip("/")
    return ""


def _json(reply: AsyncRestResponse) -> Mapping[str, Any]:
    try:
        body = loads(reply.text or "{}")
    except ValueError:  # `JsonOverBound` too
        return {}
    return body if isinstance(body, dict) else {}


def _note(shortened: float | None) -> str:
    if shortened is None:
        return ""
    return f" (the BMC asked for {shortened:g} s between polls; polled sooner to fit the deadline)"
