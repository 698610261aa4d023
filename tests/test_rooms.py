"""controller/ is rooms by concern: its top level holds only the assembly, the settings and the
inventory; every other module lives in a package (a room) whose `__init__` says what it holds and
whose re-exported names all resolve."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

CONTROLLER = Path(__file__).parents[1] / "controller"
TOP_LEVEL = {"__init__.py", "__main__.py", "app.py", "config.py", "inventory.py"}
ROOMS = sorted(
    p.name for p in CONTROLLER.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "_proto"
)


def test_the_top_level_holds_only_the_assembly_config_and_inventory() -> None:
    modules = {p.name for p in CONTROLLER.glob("*.py")}
    assert modules - TOP_LEVEL == set(), "put a new module into the room of its concern"
    assert len(ROOMS) >= 10 and "store" in ROOMS  # the scan sees the rooms
    folders = {p.name for p in CONTROLLER.iterdir() if p.is_dir() and p.name not in ("__pycache__", "_proto")}
    assert folders == set(ROOMS), f"a folder without __init__.py is no room: {sorted(folders - set(ROOMS))}"


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_says_what_it_holds_and_its_names_resolve(room: str) -> None:
    doc = ast.get_docstring(ast.parse((CONTROLLER / room / "__init__.py").read_text()))
    assert doc and len(doc) > 80, f"controller/{room}/__init__.py: say what the room holds"
    package = importlib.import_module(f"controller.{room}")
    missing = [name for name in getattr(package, "__all__", ()) if not hasattr(package, name)]
    assert not missing, f"controller.{room} exports names it cannot resolve: {missing}"
    named = [
        node.module
        for node in ast.walk(ast.parse((CONTROLLER / room / "__init__.py").read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("controller.")
    ]
    assert not [m for m in named if importlib.util.find_spec(m) is None], "it imports a missing module"
    with pytest.raises(AttributeError):
        getattr(package, "no_such_name")  # noqa: B009
