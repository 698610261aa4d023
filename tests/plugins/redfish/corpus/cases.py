"""The corpus of real BMC captures: what each must give, and one survey that drives every request kind.

Each case is served by the project's simulator (`mockup:DIR`, writes applied in memory and logged)
and driven through the plugin as the controller drives it. The survey returns what happened, for
the tests to check and for `docs/hardware.md` to show.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bmcsim import SimulatedBmc
from plugins.base import (
    ElementType,
    Empty,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    HealthQuery,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
)
from tests.plugins.redfish.harness import Harness

CORPUS = Path(__file__).resolve().parents[3] / "corpus" / "redfish"


@dataclass(frozen=True)
class Case:
    """One capture and what devicectl must do with it.

    Attributes:
        name: the directory under tests/corpus/redfish.
        system: the inventory option `system` ('' for none).
        node: a node cap to set and restore; None when node caps must be refused with `node_refusal`.
        gpu: a GPU 0 cap to set and restore; None when refused with `gpu_refusal` (skipped if the
            BMC shows no GPU).
        cpu: a node policy's CPU total to set and restore; None when CPU caps must be refused.
        power: the node power std-metrics must read; None when the BMC reports none.
    """

    name: str
    node: int | None
    power: float | None
    node_refusal: str = ""
    gpu: int | None = None
    gpu_refusal: str = ""
    cpu: int | None = None
    system: str = ""

    @property
    def id(self) -> str:
        return f"{self.name}[{self.system}]" if self.system else self.name


CASES = (
    Case("cray-ex235a", node=1000, power=736, gpu_refusal="which one it limits is not stated"),
    Case("cray-ex425", system="Node0", node=500, power=239),
    Case("cray-ex425", system="Node1", node=600, power=240),
    Case(
        "cray-ex425",
        node=None,
        power=None,
        node_refusal='name the one this device is with the inventory option `system` (e.g. system = "Node0")',
    ),
    Case(
        "cray-ex235n",
        system="Node1",
        node=None,
        power=None,
        node_refusal="no power-limit resource",
        gpu_refusal="no power-limit resource",
    ),
    Case("hpe-dl325-gen10plus", node=500, power=97),
    Case("hpe-xl675d-a100", node=2000, power=894),
    Case(
        "hpe-dl380a-gen11",
        node=None,
        power=565,
        node_refusal="no power-limit resource",
        gpu_refusal="no power-limit resource",
    ),
    Case("hpe-dl380a-gen12", node=3000, power=968, gpu_refusal="caps the whole node only"),
    Case("gigabyte-ami", node=600, power=100),
    Case(
        "openbmc-stock", node=None, power=None, node_refusal="power capping is disabled in the BMC's firmware"
    ),
    Case("intel-s2600bp", node=None, power=148, node_refusal="no power-limit resource"),
    Case("nvidia-gb300-nvl", node=2000, power=1551.717791, gpu=1000, cpu=400),
    Case("dell-xr8620t", node=None, power=4, node_refusal="no power-limit resource"),
    Case("supermicro-x10", node=None, power=0, node_refusal="no power-limit resource"),
)


@dataclass
class Step:
    """One request of the survey: its outcome and the writes it caused."""

    ok: bool
    error: str
    writes: list[tuple[str, str, Any]]
    restored: bool = True


@dataclass
class Survey:
    """What one case gave."""

    case: Case
    discovery: dict[str, Any]
    metrics_ok: bool
    power: float | None
    metrics_error: str
    steps: dict[str, Step] = field(default_factory=dict)
    #: `devicectl verify` (read-only, then a write cycle): each check's name -> status
    verified: dict[str, str] = field(default_factory=dict)


def policy(**watts: float) -> Policy:
    """A node policy with the given element totals (node=, gpu=, cpu=)."""
    limits = tuple(PolicyLimit(ElementType(k), PowerLimit(watts=w)) for k, w in watts.items())
    return Policy("corpus", limits)


def model_json(case: Case) -> dict[str, Any]:
    """The device model an `auto` inventory entry sends."""
    return {"Model": "auto", "Name": case.id}


async def survey(h: Harness, bmc: SimulatedBmc, case: Case) -> Survey:
    """Drive every request kind against one capture (see the module docstring)."""
    if case.system:
        h.options["system"] = case.system
    model = model_json(case)
    state: Any = bmc.state  # a served capture: documents and the write log
    out = await h.call("std_metrics", bmc, Empty(), model=model)
    metrics = out.result.metrics
    absent = "node power" in out.result.error
    found = Survey(
        case,
        dict((out.state or {}).get("discovery") or {}),
        out.result.ok,
        None if absent or metrics is None else metrics.power_watts,
        out.result.error,
    )
    if found.discovery.get("gpus"):
        await h.call("gpu_metrics", bmc, GpuMetricsQuery(gpu_ids=(0,)), model=model)

    async def step(name: str, method: str, request: Any, undo: tuple[str, Any] | None) -> None:
        before = copy.deepcopy(state.documents)
        mark = len(state.writes)
        result = (await h.call(method, bmc, request, model=model)).result
        ok, error = _ok(result)
        restored = True
        if undo is not None:
            await h.call(undo[0], bmc, undo[1], model=model)
            restored = state.documents == before
        found.steps[name] = Step(ok, error, list(state.writes[mark:]), restored)

    unset = PolicyChange(PolicyAction.UNSET, None)
    await step(
        "node",
        "set_policy",
        PolicyChange(PolicyAction.SET, policy(node=case.node or 700)),
        ("unset_policy", unset),
    )
    await step(
        "node 1 W", "set_policy", PolicyChange(PolicyAction.SET, policy(node=1)), ("unset_policy", unset)
    )
    if found.discovery.get("cpus"):
        cpu = PolicyChange(PolicyAction.SET, policy(cpu=case.cpu or 400))
        await step("cpu", "set_policy", cpu, ("unset_policy", unset))
    if found.discovery.get("gpus"):
        gpu = GpuPoliciesChange(
            "rg", PolicyAction.SET, None, (GpuPolicy(0, PowerLimit(watts=case.gpu or 300)),)
        )
        await step(
            "gpu 0",
            "update_gpu_policies",
            gpu,
            ("update_gpu_policies", GpuPoliciesChange("rg", PolicyAction.UNSET)),
        )
        one = GpuPoliciesChange("rg", PolicyAction.SET, None, (GpuPolicy(0, PowerLimit(watts=1)),))
        await step(
            "gpu 0 1 W",
            "update_gpu_policies",
            one,
            ("update_gpu_policies", GpuPoliciesChange("rg", PolicyAction.UNSET)),
        )
    for query in (HealthQuery(**VERIFY_FAST), HealthQuery(skip_writes=False, **VERIFY_FAST)):
        out = await h.call("bmc_health", bmc, query, model=model)
        found.verified.update({c.name: c.status for c in out.result.checks})
    return found


#: a verification's telemetry and latency samples, short (a capture's readings never move anyway)
VERIFY_FAST: dict[str, Any] = {"telemetry_interval_ms": 10, "latency_samples": 5}


def _ok(result: Any) -> tuple[bool, str]:
    results = getattr(result, "results", None)
    if results is not None:  # GPU policies: one result per GPU
        bad = [r.message for r in results if not r.ok]
        return bool(results) and not bad, "; ".join(bad)
    return bool(result.ok), str(result.error)


def allowed_writes(discovery: dict[str, Any], keys: set[str]) -> set[str]:
    """Paths a request naming `keys` may write: their limit resources and the actions under them."""
    out: set[str] = set()
    for section in ("node", "gpus", "cpus"):
        for comp in discovery.get(section) or ():
            if comp["key"] in keys or (comp["kind"] in ("node", "module") and "node" in keys):
                out.add(comp["limit_uri"].rstrip("/"))
                if comp["mechanism"] == "hpe_acc_power_limit":
                    out.add(comp["name"].rstrip("/"))
    return out


def written_outside(writes: list[tuple[str, str, Any]], allowed: set[str]) -> list[str]:
    """Writes to a resource the request did not name (an action counts as its resource's)."""
    return [
        f"{method} {path}"
        for method, path, _ in writes
        if path.rstrip("/") not in allowed and path.split("/Actions/")[0].rstrip("/") not in allowed
    ]
