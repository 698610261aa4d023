"""Click plumbing every devicectl command shares: output and debug flags accepted anywhere, client
TLS flags before or after the command, and the bridge from Click's contexts to the handlers.

Handlers take one `Options` (controller.cli._options): `call` builds it from the chain of contexts,
root first, so a flag given after the command overrides the same flag given before it, and a flag
not given keeps the root's value (its environment default, say).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from controller.cli._errors import OUTPUTS, TABULAR, explain
from controller.cli._options import Options
from controller.cli._render import err_console, print_error, set_output

F = TypeVar("F", bound=Callable[..., Any])

#: ctx.meta keys (meta is shared by every context of one command line)
_OUTPUT = "devicectl.output"
_DEBUG = "devicectl.debug"
#: sources of a value the user chose (a deeper command's flag overrides the root's only then)
_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT_MAP)


class Command(click.Command):
    """A command that takes a unique prefix of one of its long flags (`--dev` for `--device`), with
    a deprecation warning (`LongFlagPrefixes`), and refuses a one-value flag given twice."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        prefixes = LongFlagPrefixes(self, ctx, args)
        ctx.token_normalize_func = prefixes
        refuse_repeats(self, ctx, args, prefixes)
        return super().parse_args(ctx, args)


class PassThrough(click.Command):
    """A command whose words go to a tool that parses its own flags (`bmc-sim`): no prefix of the
    groups' flags is expanded in them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.token_normalize_func = None  # not the group's, which a context inherits
        return super().parse_args(ctx, args)


class Group(click.Group):
    """A group that answers a missing subcommand with a usage error (exit 2) on every Click 8
    release (8.1 printed the help and exited 0), lists its commands in definition order, and
    takes a unique prefix of its long flags before its subcommand, like Command."""

    command_class = Command
    group_class = type  # subgroups are Groups too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("no_args_is_help", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.token_normalize_func = LongFlagPrefixes(self, ctx, args)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        if not pending_args(ctx) and not self.invoke_without_command:
            raise click.UsageError(f"missing command: one of {', '.join(self.list_commands(ctx))}", ctx)
        return super().invoke(ctx)


class LazyGroup(Group):
    """The root group: a subcommand whose module is only named here (`lazy`, command -> module) is
    imported when a command line names it, or when help or completion lists the commands. Each
    `devicectl` is a new interpreter, so `devicectl status` pays for the status module, not for the
    plugin host, the inventory and the settings that `fingerprint` or `serve` load. Such a module
    has `register(group)`, which adds its commands (several commands may name one module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy: dict[str, str] = {}
        self._order: list[str] = list(self.commands)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(cmd, name)
        name = name or cmd.name
        if name is not None and name not in self._order:
            self._order.append(name)

    def add_lazy(self, module: str, *names: str) -> None:
        """`names` are registered by `module` when it is imported (listed in this order)."""
        for name in names:
            self._lazy[name] = module
            self._order.append(name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self._order)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self._lazy.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(module).register(self)
            for name in [n for n, m in self._lazy.items() if m == module]:
                if name not in self.commands:  # a declaration the module does not keep: a bug here
                    raise RuntimeError(f"{module}.register added no command {name!r}")
                del self._lazy[name]
        return super().get_command(ctx, cmd_name)


class LongFlagPrefixes:
    """A command's `Context.token_normalize_func`: Click's parser hands it each option name it
    reads (without its dashes), and it answers the command's long flag that a unique prefix the
    user wrote stands for (`undel` for `--undelivered`), with a deprecation warning: scripts
    written for the earlier command line use such prefixes. Anything else comes back as it was:
    an exact name, an ambiguous prefix (`--d`: Click's "No such option"), a short flag, and the
    choices and command names Click also normalizes with it, unless the user wrote them as `--NAME`."""

    def __init__(self, command: click.Command, ctx: click.Context, args: list[str]) -> None:
        options = [p for p in command.get_params(ctx) if isinstance(p, click.Option)]
        names = [opt for p in options for opt in (*p.opts, *p.secondary_opts)]
        self.long = [name[2:] for name in names if name.startswith("--")]
        self.written = {arg.partition("=")[0][2:] for arg in args if arg.startswith("--")}
        self.ctx = ctx

    def resolve(self, name: str) -> str:
        """The long flag (without dashes) that `name` is a unique prefix of, else `name`."""
        if name in self.long or name not in self.written:
            return name
        matches = [flag for flag in self.long if flag.startswith(name)]
        return matches[0] if len(matches) == 1 else name

    def __call__(self, name: str) -> str:
        resolved = self.resolve(name)
        if resolved != name and not self.ctx.resilient_parsing:  # not while completing
            err_console.print(
                f"warning: --{name} is deprecated (an abbreviation): write --{resolved}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        return resolved


#: flags where the last one given wins, by design (documented: `--json -o yaml`)
_LAST_WINS = {"--output", "-o"}


def refuse_repeats(
    command: click.Command, ctx: click.Context, args: list[str], prefixes: LongFlagPrefixes
) -> None:
    """A flag that takes one value, given twice with different values (`--device a --device b`),
    is refused: Click would keep only the last one, and a request would go to one device silently."""
    valued = {
        opt: p
        for p in command.get_params(ctx)
        if isinstance(p, click.Option) and not p.is_flag and not p.count and not p.multiple
        for opt in p.opts
        if opt not in _LAST_WINS
    }
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return
        name, eq, value = token.partition("=")
        if name.startswith("--"):
            name = "--" + prefixes.resolve(name[2:])
        if name in valued:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            key = valued[name].name or name
            if key in seen and seen[key] != value:
                raise click.UsageError(f"{name} given twice ({seen[key]!r}, {value!r}): give it once", ctx)
            seen[key] = value
        i += 1


def pending_args(ctx: click.Context) -> list[str]:
    """The words a group leaves for its subcommand (Click 8.2 renamed `protected_args`)."""
    protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
    return [*protected, *ctx.args]


def _output(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """`--json` and `-o/--output`: Click processes flags in command-line order, so the last wins."""
    if value is None or value is False:
        return value
    if param.name == "json":
        ctx.meta[_OUTPUT] = "json"
        return value
    if value not in OUTPUTS:
        raise click.BadParameter(f"output format must be one of {', '.join(OUTPUTS)}, got {value!r}")
    ctx.meta[_OUTPUT] = value
    return value


def _debug(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value:
        ctx.meta[_DEBUG] = True
    return value


def _attach(f: Any, params: list[click.Option]) -> Any:
    """Add options to a command (or to a function a Click decorator will make one of), listed
    in the order given."""
    if isinstance(f, click.Command):
        f.params.extend(params)
    else:
        f.__dict__.setdefault("__click_params__", []).extend(reversed(params))
    return f


def output_options(f: F) -> F:
    """`--json`, `-o/--output FORMAT` and `--debug`, on the root and on every command and group."""
    return _attach(
        f,
        [
            click.Option(
                ["--json"],
                is_flag=True,
                default=None,
                expose_value=False,
                callback=_output,
                help="machine-readable output (-o json)",
            ),
            click.Option(
                ["-o", "--output"],
                metavar="|".join(OUTPUTS),
                expose_value=False,
                callback=_output,
                shell_complete=lambda ctx, param, incomplete: [
                    o for o in OUTPUTS if o.startswith(incomplete)
                ],
                help="output format (default table; wide: every column, nothing cut; name: KIND/ID per row; "
                "csv: every column)",
            ),
            click.Option(
                ["--debug"],
                is_flag=True,
                default=None,
                expose_value=False,
                callback=_debug,
                help="show tracebacks instead of one-line errors",
            ),
        ],
    )


def client_options(f: F | None = None, *, env: bool = False) -> Any:
    """The controller's address and the TLS flags of a client command (`env=True`: the root's,
    which take their defaults from the environment)."""
    if f is None:
        return lambda g: client_options(g, env=env)

    def envvar(name: str) -> str | None:
        return f"DEVICECTL_{name}" if env else None

    return _attach(
        f,
        [
            click.Option(
                ["--server"],
                envvar=envvar("SERVER"),
                default="127.0.0.1:50051" if env else None,
                help="controller address for client commands (env DEVICECTL_SERVER)",
            ),
            click.Option(
                ["--ca-cert"],
                envvar=envvar("CA_CERT"),
                help="CA bundle that verifies the controller (enables TLS)",
            ),
            click.Option(["--cert"], envvar=envvar("CERT"), help="client certificate (PEM) for mutual TLS"),
            click.Option(["--key"], envvar=envvar("KEY"), help="client certificate's private key (PEM)"),
            click.Option(
                ["--server-name"],
                envvar=envvar("SERVER_NAME"),
                help="name expected in the server's certificate",
            ),
            click.Option(
                ["--tls"],
                is_flag=True,
                default=None,
                help="use TLS with the system's CAs (implied by --ca-cert/--cert)",
            ),
            click.Option(
                ["--insecure"], is_flag=True, default=None, help="allow plaintext to a non-loopback address"
            ),
        ],
    )


def server_tls_options(f: Any) -> Any:
    """A server's TLS flags (`serve`, `agent`, `topology-sink`)."""
    for decorator in (
        click.option(
            "--insecure",
            is_flag=True,
            default=None,
            help="allow plaintext on a non-loopback address (logged)",
        ),
        click.option("--tls-client-ca", help="CA for client certificates: mutual TLS, certificate required"),
        click.option("--tls-key", help="server private key (PEM)"),
        click.option("--tls-cert", help="server certificate (PEM); with --tls-key serves TLS"),
    ):
        f = decorator(f)
    return f


def options_from(ctx: click.Context, **extra: Any) -> Options:
    """The handler's view of one command line: every context's values, deepest given value wins."""
    chain: list[click.Context] = []
    node: click.Context | None = ctx
    while node is not None:
        chain.append(node)
        node = node.parent
    values: dict[str, Any] = {}
    for c in reversed(chain):
        for name, default in getattr(c.command, "defaults", {}).items():
            values.setdefault(name, default)
        for name, value in c.params.items():
            if name not in values or c.get_parameter_source(name) in _GIVEN or values[name] is None:
                values[name] = list(value) if isinstance(value, tuple) else value
    output = ctx.meta.get(_OUTPUT, "table")
    values.update(
        output=output,
        json=output not in TABULAR,
        wide=bool(values.get("wide")) or output in ("wide", "csv"),
        debug=bool(ctx.meta.get(_DEBUG)),
        **extra,
    )
    return Options(**values)


def call(handler: Callable[[Options], int], **extra: Any) -> int:
    """Run a handler on the current command line; errors a user can act on become one line on
    stderr and an exit code (2: usage or input, 1: failure), a traceback only with `--debug`."""
    ctx = click.get_current_context()
    args = options_from(ctx, **extra)
    set_output(args.output, wide=args.wide, no_headers=bool(getattr(args, "no_headers", False)))
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        with contextlib.suppress(Exception):
            sys.stdout.close()
        return 0
    except Exception as exc:
        explained = explain(exc, args)
        if args.debug:
            traceback.print_exc()
            return explained[1] if explained else 1
        if explained is None:
            print_error(f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)")
            return 1
        message, code = explained
        print_error(message)
        return code
