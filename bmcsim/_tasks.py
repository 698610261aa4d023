"""Redfish tasks for asynchronous writes (202 Accepted + task monitor)."""

from __future__ import annotations

import datetime as dt
import json
from collections import OrderedDict
from typing import Any

from bmcsim._messages import message, success_body

TASKS_PATH = "/redfish/v1/TaskService/Tasks"
MONITORS_PATH = "/redfish/v1/TaskService/TaskMonitors"


class Task:
    """One asynchronous operation; `TaskState` goes Running -> Completed."""

    __slots__ = ("end", "failure", "gave_204", "id", "method", "payload", "start", "state", "target")

    def __init__(self, task_id: str, method: str, target: str, payload: Any) -> None:
        self.id = task_id
        self.method = method
        self.target = target
        self.payload = payload
        self.state = "Running"
        self.start = _iso_now()
        self.end: str | None = None
        self.failure: str | None = None
        #: bmcweb's task monitor answers 204 once after the task ends, then 404
        self.gave_204 = False

    @property
    def path(self) -> str:
        """The task's URI, which is also its task monitor."""
        return f"{TASKS_PATH}/{self.id}"

    @property
    def monitor(self) -> str:
        """bmcweb's task monitor URI (the default profile uses the task's own URI)."""
        return f"{MONITORS_PATH}/{self.id}"

    def complete(self) -> None:
        """Mark the task Completed (its write has just been applied)."""
        self.state = "Completed"
        self.end = _iso_now()

    def fail(self, reason: str) -> None:
        """Mark the task failed (`Exception`, `Critical`): its write was not applied."""
        self.state = "Exception"
        self.failure = reason
        self.end = _iso_now()

    def document(self) -> dict[str, Any]:
        """The `#Task.v1_7_4.Task` document."""
        done = self.state != "Running"
        doc: dict[str, Any] = {
            "@odata.id": self.path,
            "@odata.type": "#Task.v1_7_4.Task",
            "Id": self.id,
            "Name": f"Task {self.id}",
            "TaskState": self.state,
            "TaskStatus": "Critical" if self.failure else "OK",
            "PercentComplete": 100 if done else 0,
            "StartTime": self.start,
            "TaskMonitor": self.path,
            "Payload": {
                "HttpOperation": self.method,
                "TargetUri": self.target,
                "JsonBody": json.dumps(self.payload, separators=(",", ":")),
            },
            "Messages": (
                [message("TaskEvent.1.0.3.TaskAborted", self.failure, [self.id], severity="Critical")]
                if self.failure
                else success_body()["@Message.ExtendedInfo"]
                if done
                else [
                    message(
                        "TaskEvent.1.0.3.TaskStarted",
                        f"The task with Id '{self.id}' has started.",
                        [self.id],
                        severity="OK",
                    )
                ]
            ),
        }
        if self.end is not None:
            doc["EndTime"] = self.end
        return doc


class TaskStore:
    """The tasks of one BMC; only the most recent `keep` are remembered (BMCs overwrite old tasks)."""

    def __init__(self, keep: int = 32) -> None:
        self._keep = keep
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._next = 1

    def create(self, method: str, target: str, payload: Any) -> Task:
        """Register a new running task."""
        task = Task(str(self._next), method, target, payload)
        self._next += 1
        self._tasks[task.id] = task
        while len(self._tasks) > self._keep:
            self._tasks.popitem(last=False)
        return task

    def get(self, task_id: str) -> Task | None:
        """A remembered task by id."""
        return self._tasks.get(task_id)

    def ids(self) -> list[str]:
        """Ids of the remembered tasks, oldest first."""
        return list(self._tasks)

    def running(self) -> int:
        """How many tasks have not completed yet."""
        return sum(1 for t in self._tasks.values() if t.state == "Running")


def _iso_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
