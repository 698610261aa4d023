"""What one platform module declares: the evidence it matches, how it writes and restores, its quirks,
and the probe that turns what discovery read into the result (`Platform`); `Probe` is what discovery
read, handed to each platform in the registry's order (`plugins.redfish._platforms.registry`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from plugins.redfish._discovery.layout import Component, Discovery
from plugins.redfish._discovery.walk import Walker
from plugins.redfish._wire.document import Document


@dataclass
class ControlCaps:
    """What the power Controls carry: the node's cap, each processor's, and the group budgets."""

    node: Component | None = None
    components: dict[str, Component] = field(default_factory=dict)
    groups: list[Component] = field(default_factory=list)
    #: why GPUs / CPUs (by kind) have no cap of their own, when a Control was found but not placed
    why_not: dict[str, str] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        """Whether any Control carries a cap devicectl may write for one component."""
        return self.node is not None or bool(self.components)


@dataclass
class Probe:
    """What discovery read of one node, for the platforms to match on.

    Attributes:
        walker: discovery's reads (each resource once; a link the BMC cannot serve is absent).
        root: the service root.
        base: the result so far (service facts, systems, firmware).
        hint: the platform asked for (`auto`: probe).
        chassis: the node's own chassis; `every_chassis`: all of them.
        processors / gpus / cpus: the node's Processors and its GPU and CPU components.
        classified: the node's power Controls, sorted by what they limit (`classify`).
    """

    walker: Walker
    root: Document
    base: Discovery
    hint: str
    chassis: list[Document]
    every_chassis: list[Document]
    processors: list[Document]
    gpus: list[Component]
    cpus: list[Component]
    classified: ControlCaps = field(default_factory=ControlCaps)


@dataclass(frozen=True)
class Platform:
    """One platform, as its module declares it.

    Attributes:
        name: the platform's name (`inventory check --login` names the one matched).
        matches: the evidence it needs to match, in words.
        writes: how it sets a cap; `restores`: how it puts the first GET's value back.
        quirks: vendor behaviour it handles, each with its source.
        refuses: what it refuses, each with the evidence that makes it refuse (docs/hardware.md).
        probe: the result when this platform matches what was read, else None (the next one tries).
    """

    name: str
    matches: str
    writes: str
    restores: str
    probe: Callable[[Probe], Awaitable[Discovery | None]]
    quirks: tuple[str, ...] = ()
    refuses: tuple[str, ...] = ()


def matched(found: Discovery, platform: Platform) -> Discovery:
    """The result, naming the platform that matched and the evidence it needs (`Discovery.extra`)."""
    return replace(found, extra={**found.extra, "matched": platform.name, "matches": platform.matches})
