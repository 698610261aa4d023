"""`Device`: everything one operation needs, and how it is prepared (connection, state, discovery)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from plugins.base import DeviceContext, SystemSpec
from plugins.redfish._client.client import BmcClient
from plugins.redfish._client.pool import BmcPool
from plugins.redfish._config import ConnectionSettings, RedfishSettings
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._device.schema import check_model
from plugins.redfish._device.state import DeviceState
from plugins.redfish._discovery.discovery import Discovery, discover, platform_hint
from plugins.redfish._discovery.walk import LimitRead
from plugins.redfish._wire.errors import (
    ConnectionFailedError,
    DeadlineExceededError,
    RequestTimeoutError,
    TlsError,
)

log = logging.getLogger(__name__)


@dataclass
class Device:
    """One device during one operation.

    Attributes:
        ctx: the operation's context (deadline, model, state in).
        bmc: the BMC as this operation sees it (deadline, reachability).
        discovery: the BMC's platform and resource URIs.
        state: the working copy of the device state (returned in `Outcome.state`).
        spec: the device spec, with counts taken from what the BMC shows.
        settings: the BMC's connection settings.
        limit_reads: where this operation discovered the BMC, its GETs of the limit resources
            (the first cap change's pre-write reads: `plugins.redfish._capping.priors`).
    """

    ctx: DeviceContext
    bmc: OpBmc
    discovery: Discovery
    state: DeviceState
    spec: SystemSpec
    settings: ConnectionSettings
    limit_reads: dict[str, LimitRead] = field(default_factory=dict)
    #: the spec with the node's range as the BMC reported it, and what it was made from (the
    #: spec and the range: `plugins.redfish._capping.operations._bmc_node_range`)
    node_range: tuple[SystemSpec, float, float, SystemSpec] | None = None

    @property
    def name(self) -> str:
        """The device's name for metrics and messages."""
        return self.spec.name or self.ctx.device_id


async def connect(
    pool: BmcPool, defaults: RedfishSettings, ctx: DeviceContext, spec: SystemSpec | None = None
) -> tuple[BmcClient, ConnectionSettings]:
    """The BMC client for a device (its endpoint, else the URL in its model JSON; `spec`: the
    model's `SystemSpec.from_model`, where the caller made it)."""
    endpoint = ctx.endpoint
    if not endpoint.url:
        url = (spec if spec is not None else SystemSpec.from_model(ctx.model)).redfish_url
        endpoint = replace(endpoint, url=url)
    settings = pool.settings_for(endpoint, defaults)
    client = await pool.client(settings, ctx.device_id)
    return client, settings


async def prepare(pool: BmcPool, defaults: RedfishSettings, ctx: DeviceContext) -> Device:
    """Connect, load the state and make sure discovery is known (from state, cache, or the BMC)."""
    spec = check_model(ctx.model)  # the model's SystemSpec.from_model, made by the check
    state = DeviceState(ctx.state)  # checked and migrated first: hostile state never reaches the BMC code
    client, settings = await connect(pool, defaults, ctx, spec)
    bmc = OpBmc(client, ctx.deadline)
    bmc.etag_policy = settings.etag_policy
    bmc.persistent = settings.persistent_caps
    bmc.allow_power_off = settings.allow_power_off_on_limit
    client.note_sessions(state.sessions(client.origin))
    client.reap_if_logged_in()
    model_name = str(ctx.model.get("Model") or ctx.model.get("model") or spec.model or "")
    hint = platform_hint(model_name, settings.platform)
    system = settings.system
    # the client's parsed discovery, when the state still holds the very section it came from
    section = state.discovery_section
    stored = client.discovery if section is not None and section is client.discovery_section else None
    discovery = _usable(stored or state.discovery, client.origin, model_name, hint, system)
    if discovery is None:
        # NOTE: devices behind one BMC share its client (session, concurrency limit) but each names
        # its own system: the client's cached discovery serves only the same system
        discovery = _usable(client.discovery, client.origin, model_name, hint, system)
        if discovery is not None:
            state.discovery = discovery
    limit_reads: dict[str, LimitRead] = {}
    if discovery is None:
        log.info("%s: discovering the Redfish service (%s)", client.origin, hint)
        try:
            discovery = await discover(
                bmc.client,
                model=model_name,
                hint=hint,
                deadline=ctx.deadline,
                system=system,
                limit_reads=limit_reads,
            )
        except (ConnectionFailedError, RequestTimeoutError, TlsError, DeadlineExceededError) as exc:
            bmc.reach_error = str(exc)
            raise
        bmc.reached_at = datetime.now(UTC)
        state.discovery = discovery
    client.discovery = discovery
    client.discovery_section = state.discovery_section
    return Device(ctx, bmc, discovery, state, _fit(spec, discovery), settings, limit_reads)


def record_session(device: Device) -> None:
    """Keep the URI of the BMC session in use (and of leftovers not deleted yet) in the device state."""
    client = device.bmc.client
    uris = [*client.stale_sessions, client.session_uri] if client.session_uri else client.stale_sessions
    device.state.set_sessions(client.origin, [u for u in uris if u])


def invalidate(device: Device) -> None:
    """Drop the cached discovery (a cached URI answered 404): the next request discovers again."""
    device.state.discovery = None
    device.state.clear_readings()  # they describe the resources discovery is about to replace
    device.bmc.client.discovery = None
    device.bmc.client.discovery_section = None


def _usable(found: Discovery | None, origin: str, model: str, hint: str, system: str) -> Discovery | None:
    if found is None or found.url != origin or found.model != model or found.system != system:
        return None
    if hint != "auto" and found.platform != hint:
        return None
    return found


def _fit(spec: SystemSpec, discovery: Discovery) -> SystemSpec:
    """The spec with component counts as the BMC shows them (the split is across real devices)."""
    updates = {}
    for kind, found in (("gpu", discovery.gpus), ("cpu", discovery.cpus)):
        comp = getattr(spec, kind)
        if found and comp.count != len(found):
            if comp.count:
                log.warning(
                    "%s: the device spec says %d %ss, the BMC shows %d; splitting across %d",
                    discovery.url,
                    comp.count,
                    kind.upper(),
                    len(found),
                    len(found),
                )
            updates[kind] = replace(comp, count=len(found))
    return replace(spec, **updates) if updates else spec
