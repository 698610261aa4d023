"""The `send` command group: one subcommand per request kind with only the flags that kind uses
(required ones marked required), plus `send file` for a request written as protobuf JSON.

The forms scripts used with the argparse CLI keep working: `send --file F` (no kind) is `send file
--file F`; with a warning (deprecated), flags before the kind (`send --device d ping`) are moved
after it, `send KIND --file F` sends the file, and another kind's flag given at its default value
(`--resource-group ""` on a ping) is dropped.
"""

from __future__ import annotations

from typing import Any

import click

from controller.cli._click import Command, Group, call, client_options, output_options
from controller.cli._lists import selector_option
from controller.cli._render import err_console
from controller.cli._send import KIND_FLAGS, KINDS, Watts
from controller.cli._send_fleet import send
from plugins.base import RequestKind

#: each kind flag: (declaration, Click keywords); its name is the handler's attribute
_KIND_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "resource_group": ("--resource-group", {"default": "", "help": "resource group id"}),
    "node": ("--node", {"type": Watts(), "help": "node policy: node total watts"}),
    "gpu_total": ("--gpu-total", {"type": Watts(), "help": "node policy: watts across all GPUs"}),
    "cpu": ("--cpu", {"type": Watts(), "help": "node policy: watts across all CPUs"}),
    "memory": ("--memory", {"type": Watts(), "help": "node policy: watts across memory"}),
    "policy_name": ("--policy-name", {"default": "cli", "help": "name of the node policy the flags build"}),
    "unset": ("--unset", {"is_flag": True, "default": False, "help": "unset/reset instead of set"}),
    "gpu": (
        "--gpu",
        {
            "multiple": True,
            "metavar": "ID=WATTS",
            "help": "GPU-specific cap, e.g. --gpu 0=500; WATTS may be 80% (of the GPU's maximum) or "
            "'none', which removes that GPU's cap: it falls back to its share of the node policy, else to "
            "its limit from before devicectl, else to no cap (refused where the GPU's cap cannot be "
            "written); repeatable",
        },
    ),
    "enable": ("--enable", {"multiple": True, "type": int, "metavar": "ID", "help": "profile id to enable"}),
    "disable": (
        "--disable",
        {"multiple": True, "type": int, "metavar": "ID", "help": "profile id to disable"},
    ),
    "no_verify": (
        "--no-verify",
        {"is_flag": True, "default": False, "help": "disable asynchronous profile verification"},
    ),
    "retry_count": ("--retry-count", {"type": int, "default": 0, "help": "the device's ping retries"}),
    "gpu_id": ("--gpu-id", {"multiple": True, "type": int, "help": "GPU ids (default all); repeatable"}),
    "phase": ("--phase", {"type": int, "default": 0, "help": "model change phase"}),
    "old_model": ("--old-model", {"help": "file with the old device model JSON"}),
    "new_model": ("--new-model", {"help": "file with the new device model JSON"}),
}
#: what the handler reads for a flag the kind does not have
_UNSET: dict[str, Any] = {
    "file": None,
    "kind": None,
    "unset": False,
    "no_verify": False,
    "gpu": [],
    "enable": [],
    "disable": [],
    "gpu_id": [],
    "policy_name": "cli",
    "resource_group": "",
    "retry_count": 0,
    "phase": 0,
    "trace_id": "",
    "model_json": None,
    "state_json": None,
    **{name: None for name in ("node", "gpu_total", "cpu", "memory", "old_model", "new_model")},
}
_REQUIRED = {
    "rg-activate": {"resource_group"},
    "rg-update": {"resource_group"},
    "rg-deactivate": {"resource_group"},
}
_HELP = {
    RequestKind.RESOURCE_GROUP_ACTIVATE: "activate a resource group: node policy, GPU caps, profiles",
    RequestKind.RESOURCE_GROUP_UPDATE: "update a resource group's policy, GPU caps or profiles",
    RequestKind.RESOURCE_GROUP_DEACTIVATE: "deactivate a resource group (--unset clears its caps)",
    RequestKind.TOPOLOGY_ACTIVATE: "set the node policy of a topology",
    RequestKind.TOPOLOGY_DEACTIVATE: "clear or set the node policy on deactivation",
    RequestKind.GPU_POLICIES_UPDATE: "set (or --unset) per-GPU power caps",
    RequestKind.ENABLE_WORKLOAD_PROFILE: "enable workload power profiles",
    RequestKind.DISABLE_WORKLOAD_PROFILE: "disable workload power profiles",
    RequestKind.UPDATE_WORKLOAD_PROFILE: "enable and disable workload power profiles at once",
    RequestKind.PING: "check the device answers",
    RequestKind.GPU_METRICS: "read GPU power usage",
    RequestKind.RAW_METRICS: "read the device's raw metrics",
    RequestKind.STD_METRICS: "read node, GPU and CPU power, energy and limits",
    RequestKind.MODIFY_ENTITY_MODEL: "change the device's entity model (--old-model, --new-model)",
}
_ALL_KIND_FLAGS = {decl for decl, _ in _KIND_OPTIONS.values()}


def _common(*, device_required: bool) -> list[click.Option]:
    return [
        click.Option(
            ["--device"],
            required=device_required,
            help="device id in the topology (or -l KEY=VALUE: every inventory node with those labels)",
        ),
        click.Option(["--request-id"], default="", help="default: a new UUID"),
        click.Option(
            ["--timeout"], type=int, default=0, help="timeout_seconds (0: the controller's default)"
        ),
        click.Option(["--wait"], is_flag=True, default=False, help="wait for the response and print it"),
        click.Option(
            ["--wait-delivery"], is_flag=True, default=False, help="with --wait: also until delivered"
        ),
        click.Option(
            ["--wait-timeout"],
            type=float,
            help="with --wait: give up after this many seconds (exit 1; default: max(--timeout, 600) + 30)",
        ),
        click.Option(
            ["--dry-run"],
            is_flag=True,
            default=False,
            help="plan only (admin DryRun): print the writes it would make; nothing is written or journaled",
        ),
    ]


class _KindCommand(Command):
    """A kind's command: a flag another kind uses is refused by name (it used to be ignored)."""

    def __init__(self, *args: Any, defaults: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.defaults = defaults

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, self._without_default_flags(ctx, args))
        except click.NoSuchOption as exc:
            if exc.option_name in _ALL_KIND_FLAGS:
                raise click.UsageError(f"{exc.option_name} not used by this kind", ctx) from None
            raise

    def _without_default_flags(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Drop another kind's flag given with its default value (`--resource-group ""` on a ping),
        which argparse accepted, with a warning; any other value is refused by parse_args."""
        mine = {opt for param in self.params for opt in param.opts}
        out: list[str] = []
        i = 0
        while i < len(args):
            flag, eq, value = args[i].partition("=")
            default = _DEFAULT_OF.get(flag)
            if default is not None and flag not in mine and (eq or i + 1 < len(args)):
                given = value if eq else args[i + 1]
                if given == default:
                    if not ctx.resilient_parsing:
                        _warn(f"{flag} {given!r} is deprecated here: send {self.name} does not use it")
                    i += 1 if eq else 2
                    continue
            out.append(args[i])
            i += 1
        return out


#: flags that take a value, with the default a script may have passed to every kind
_DEFAULT_OF = {
    _KIND_OPTIONS[name][0]: str(_UNSET[name])
    for name in ("resource_group", "policy_name", "retry_count", "phase")
}


def _run(**_: Any) -> int:
    return call(send)


def _kind_command(name: str, kind: RequestKind) -> click.Command:
    params: list[click.Parameter] = []
    for flag in sorted(KIND_FLAGS[kind], key=list(_KIND_OPTIONS).index):
        decl, options = _KIND_OPTIONS[flag]
        params.append(click.Option([decl], required=flag in _REQUIRED.get(name, ()), **options))
    params += [
        *_common(device_required=False),
        click.Option(["--trace-id"], default="", help="trace id carried through to the response"),
        click.Option(["--model-json"], help="file with device_model_json"),
        click.Option(["--state-json"], help="file with device_state_json"),
    ]
    command = _KindCommand(
        name,
        callback=_run,
        params=params,
        help=_HELP[kind][0].upper() + _HELP[kind][1:],
        defaults={k: v for k, v in _UNSET.items() if k not in KIND_FLAGS[kind]} | {"kind": name},
    )
    command = selector_option(command)
    return client_options(output_options(command))  # type: ignore[arg-type]


def _file_command() -> click.Command:
    command = _KindCommand(
        "file",
        callback=_run,
        params=[
            click.Option(
                ["--file"], required=True, help="a DeviceControllerRequest in protobuf JSON (any kind)"
            ),
            *_common(device_required=False),
        ],
        help="Send a request written as protobuf JSON (--device overrides its device).",
        defaults=dict(_UNSET),
    )
    return client_options(output_options(command))  # type: ignore[arg-type]


class _SendGroup(Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._kind_first(ctx, args))

    def _kind_first(self, ctx: click.Context, args: list[str]) -> list[str]:
        """`send --file F ...` as `send file --file F ...`; `send --device d ping` as `send ping
        --device d` (the argparse CLI took flags before the kind)."""
        valued = {
            opt
            for command in self.commands.values()
            for param in command.params
            if isinstance(param, click.Option) and not param.is_flag
            for opt in param.opts
        }
        i = 0
        while i < len(args) and args[i] != "--":
            if args[i] in self.commands:
                break
            i += 2 if args[i] in valued else 1
        else:
            if any(a == "--file" or a.startswith("--file=") for a in args):
                return ["file", *args]
            return args
        if args[i] == "file":  # `send file --file F`: the form the warning below asks for
            return args if i == 0 else [args[i], *args[:i], *args[i + 1 :]]
        if any(a == "--file" or a.startswith("--file=") for a in args):  # argparse: the file wins
            if not ctx.resilient_parsing:
                _warn(
                    f"`send {args[i]} --file F` is deprecated (the file names the kind): "
                    "write `send file --file F`"
                )
            return ["file", *args[:i], *args[i + 1 :]]
        if _beyond_output_flags(args[:i]) and not ctx.resilient_parsing:  # not while completing
            _warn(
                "flags before the kind are deprecated: "
                f"write `devicectl send {args[i]} {' '.join(args[:i])} ...`"
            )
        return [args[i], *args[:i], *args[i + 1 :]]


def _warn(message: str) -> None:
    err_console.print(f"warning: {message}", highlight=False, markup=False, soft_wrap=True)


def _beyond_output_flags(head: list[str]) -> bool:
    """Whether flags before the kind include more than the output flags (accepted anywhere)."""
    j = 0
    while j < len(head):
        token = head[j]
        if token in ("-o", "--output"):
            j += 2
            continue
        if token not in ("--json", "--debug") and not token.startswith(("--output=", "-o")):
            return True
        j += 1
    return False


def register(cli: click.Group) -> None:
    @cli.group("send", cls=_SendGroup)
    @output_options
    def send() -> None:
        """Send a request to a running controller: `devicectl send KIND --device ID [flags]`.

        Each kind takes only the flags it uses; `devicectl send KIND --help` lists them.
        `-l rack=r12` instead of --device sends to every inventory node with those labels
        (with --dry-run: the node count, then each node's plan).
        """

    for name, kind in KINDS.items():
        send.add_command(_kind_command(name, kind))
    send.add_command(_file_command())
