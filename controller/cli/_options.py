"""`Options`: what a command's handler reads of its command line, as Click parsed it.

Click builds it (`controller.cli._click.options_from`) from the chain of contexts of one command
line, root first: a flag given after the command overrides the same flag given before it, and a flag
not given keeps the root's value (its environment default, say). A leaf module: the handlers, the
error messages and the Click plumbing all name it.
"""

from __future__ import annotations

from typing import Any


class Options:
    """One command line's parameters by name (`options.device`, `options.limit`), with the output
    settings every command shares typed below.

    A parameter the command does not have raises AttributeError, so a handler shared by several
    commands reads an optional one with `getattr(options, "watch", False)`.
    """

    #: -o/--output: table, wide, json, yaml, name or csv (`--json` is json)
    output: str
    #: the output is a document (json or yaml), not a table
    json: bool
    #: a table with every column, uncut (-o wide, -o csv, or the command's --wide)
    wide: bool
    #: --debug: tracebacks instead of one-line errors
    debug: bool

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        """Only reached for a name the command line does not have (each command's own parameters
        are not declared above, so the type checker reads them as Any)."""
        raise AttributeError(f"this command has no parameter {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        """A handler may adjust a value for what it runs next (`agent`: no callback; `send -l`:
        each node's own copy with its device)."""
        self.__dict__[name] = value

    def __repr__(self) -> str:
        return f"Options({', '.join(f'{k}={v!r}' for k, v in sorted(vars(self).items()))})"
