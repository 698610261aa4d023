"""A plugin that serves a request kind devicectl does not have: `identify_led` lights a node's
identify LED for some seconds. The kind is one row (`IDENTIFY_LED`) and this plugin's coroutine;
tests/plugins/external/test_kind_table.py adds the controller's side of the row.

Run as a module (`python -m tests.plugins.external.identify_led_plugin`) it registers the kind in its
own process and serves the plugin, as a plugin package that brings its own kind would.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from plugins.base import DeviceContext, DevicePlugin, InvalidRequestError, Outcome, PluginInfo
from plugins.base.kinds import KINDS, Kind


@dataclass(frozen=True)
class IdentifyLed:
    seconds: int


@dataclass(frozen=True)
class IdentifyLedResult:
    ok: bool
    error: str = ""
    lit_for: int = 0


#: the kind's row: it changes the device (a newer request overtaking it must not be undone)
IDENTIFY_LED = Kind("identify_led", IdentifyLed, IdentifyLedResult, "identify_led")


class LedPlugin(DevicePlugin):
    info = PluginInfo(name="led", version="1.0", vendor="tests")

    async def identify_led(self, ctx: DeviceContext, req: IdentifyLed) -> Outcome[IdentifyLedResult]:
        if req.seconds > int(ctx.model.get("max_seconds", 255)):
            raise InvalidRequestError(
                f"identify_led: this node lights its LED at most {ctx.model['max_seconds']} s"
            )
        lit = int(ctx.state.get("lit_total", 0)) + req.seconds
        return Outcome(IdentifyLedResult(ok=True, lit_for=req.seconds), state={"lit_total": lit})


if __name__ == "__main__":
    from plugins.base.serving import serve

    KINDS.register(IDENTIFY_LED)
    sys.exit(serve(LedPlugin()))
