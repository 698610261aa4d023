"""Alembic's parts the store uses, imported without `pygments`.

Alembic renders migration templates with Mako, whose error pages highlight source with `pygments`
when it can be imported: ~5 MB of lexers a serving controller holds for nothing (Mako escapes the
text instead without it). `pygments` is hidden only while these imports run, and only when nothing
has imported it already; a later `import pygments` works as usual.
"""

from __future__ import annotations

import sys

_hidden = "pygments" not in sys.modules
if _hidden:
    sys.modules["pygments"] = None  # type: ignore[assignment]  # the import system's "not there"
try:
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
finally:
    if _hidden and "pygments" in sys.modules and sys.modules["pygments"] is None:
        del sys.modules["pygments"]

__all__ = ["Config", "MigrationContext", "ScriptDirectory", "command"]
