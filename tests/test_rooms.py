"""controller/ and the Redfish plugin are rooms by concern: controller/'s top level holds only the
assembly, the settings and the inventory, plugins/redfish/'s only the plugin class and its settings;
every other module lives in a package (a room) whose `__init__` says what it holds. The BMC simulator
is a package of its own, bmcsim/, whose `__init__` names every module. The controller's tests mirror
its rooms: tests/controller/<room>/; the plugins' tests theirs: tests/plugins/<plugin>/<room>/
(docs/testing.md)."""

from __future__ import annotations

import ast
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
def test_each_room_says_what_it_holds(room: str) -> None:
    """A room's `__init__` is its table of contents: a paragraph that names every public module."""
    folder = CONTROLLER / room
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    assert doc and len(doc) > 80, f"controller/{room}/__init__.py: say what the room holds"
    unnamed = [p.stem for p in folder.glob("*.py") if not p.name.startswith("_") and f"`{p.stem}`" not in doc]
    assert not unnamed, f"controller/{room}/__init__.py: say what these modules hold: {unnamed}"


REDFISH = Path(__file__).parents[1] / "plugins" / "redfish"
REDFISH_ROOMS = sorted(p.name for p in REDFISH.iterdir() if p.is_dir() and (p / "__init__.py").exists())


@pytest.mark.parametrize("room", REDFISH_ROOMS)
def test_each_redfish_room_says_what_it_holds(room: str) -> None:
    """The plugin's rooms are private (`_wire`), the modules in them are not: the `__init__` names
    every one, so the room's table of contents is whole."""
    folder = REDFISH / room
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    assert doc and len(doc) > 80, f"plugins/redfish/{room}/__init__.py: say what the room holds"
    unnamed = [p.stem for p in folder.glob("*.py") if not p.name.startswith("_") and f"`{p.stem}`" not in doc]
    assert not unnamed, f"plugins/redfish/{room}/__init__.py: say what these modules hold: {unnamed}"
    assert room.startswith("_"), (
        f"plugins/redfish/{room}: a room is private (the plugin's API is its __init__)"
    )


BMCSIM = Path(__file__).parents[1] / "bmcsim"


def test_the_simulator_is_one_package_whose_init_names_every_module() -> None:
    """bmcsim/ is the one home of what imitates or records a BMC, apart from the plugin it tests; its
    `__init__` names every module (they are private to it, so each one, not only the public ones)."""
    doc = ast.get_docstring(ast.parse((BMCSIM / "__init__.py").read_text()))
    modules = sorted(p.stem for p in BMCSIM.glob("*.py") if p.name != "__init__.py")
    assert len(modules) > 30 and "capture" in modules  # the scan sees the simulator and the capture tool
    unnamed = [m for m in modules if f"`{m}`" not in (doc or "")]
    assert not unnamed, f"bmcsim/__init__.py: say what these modules hold: {unnamed}"
    assert not (Path(__file__).parents[1] / "plugins" / "redfish" / "simulator").exists()


REDFISH_TOP = {"__init__.py", "_plugin.py", "_config.py", "_plugin_config.py"}


def test_the_redfish_top_level_holds_only_the_plugin_and_its_settings() -> None:
    modules = {p.name for p in REDFISH.glob("*.py")}
    assert modules - REDFISH_TOP == set(), (
        "put a new module of the Redfish plugin into the room of its concern"
    )
    assert len(REDFISH_ROOMS) >= 8 and "_wire" in REDFISH_ROOMS  # the scan sees the rooms
    folders = {p.name for p in REDFISH.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(REDFISH_ROOMS), (
        f"a folder without __init__.py is no room: {sorted(folders - set(REDFISH_ROOMS))}"
    )


TESTS = Path(__file__).parent
CONTROLLER_TESTS = TESTS / "controller"
TOP_LEVEL_SUBJECTS = ("test_app", "test_config", "test_inventory")


def test_controller_tests_sit_beside_their_room() -> None:
    """tests/controller/ mirrors controller/: a test module sits in the folder of the room it tests
    (tests/controller/store/ for controller/store/), and at the top only for what lives at the top,
    the assembly, the settings and the inventory (`test_app…`, `test_config…`, `test_inventory…`)."""
    modules = sorted(CONTROLLER_TESTS.rglob("test_*.py"))
    assert len(modules) > 100  # the scan sees the controller's tests
    misplaced = []
    for module in modules:
        parts = module.relative_to(CONTROLLER_TESTS).parts
        if len(parts) == 1:
            if not module.name.startswith(TOP_LEVEL_SUBJECTS):
                misplaced.append(f"{module.name}: not app, config or inventory; put it in its room's folder")
        elif parts[0] not in ROOMS:
            misplaced.append(f"{'/'.join(parts)}: {parts[0]} is no room of controller/ ({', '.join(ROOMS)})")
    assert not misplaced, "tests/controller/: " + "; ".join(misplaced)
    folders = {p.name for p in CONTROLLER_TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    strays = sorted(folders - set(ROOMS))
    assert not strays, f"tests/controller/: folders named after no room: {strays}"


def test_no_room_keeps_its_tests_outside_tests_controller() -> None:
    """A room's tests have one home: a folder named after a controller room directly under tests/
    (tests/store/, tests/translate/) is a second one."""
    folders = {p.name for p in TESTS.iterdir() if p.is_dir()}
    assert "controller" in folders and "plugins" in folders  # the scan sees the suite
    assert not folders & set(ROOMS), f"move these into tests/controller/: {sorted(folders & set(ROOMS))}"


PLUGINS = TESTS.parent / "plugins"
PLUGIN_TESTS = TESTS / "plugins"
REDFISH_TESTS = PLUGIN_TESTS / "redfish"
# A room's test folder drops the room's leading underscore: tests/plugins/redfish/wire/ for _wire/.
REDFISH_TEST_FOLDERS = {room.removeprefix("_") for room in REDFISH_ROOMS}
# Besides the rooms: the captures of real BMCs, each driven through the whole plugin.
REDFISH_WHOLE_PLUGIN_FOLDERS = {"corpus"}
# Besides the plugins: the out-of-process plugin host (plugins.base's serving), the Go host.
PLUGIN_HOST_FOLDERS = {"external", "gohost"}


def test_redfish_tests_sit_beside_their_room() -> None:
    """tests/plugins/redfish/ mirrors plugins/redfish/: a test module sits in the folder of the room
    it tests, named as the room without its underscore (wire/ for _wire/), or in corpus/ (captures
    of real BMCs), or at the top for the plugin as a whole (docs/testing.md)."""
    modules = sorted(REDFISH_TESTS.rglob("test_*.py"))
    assert len(modules) > 40  # the scan sees the plugin's tests
    allowed = REDFISH_TEST_FOLDERS | REDFISH_WHOLE_PLUGIN_FOLDERS
    misplaced = [
        "/".join(parts)
        for parts in (m.relative_to(REDFISH_TESTS).parts for m in modules)
        if len(parts) > 1 and parts[0] not in allowed
    ]
    assert not misplaced, (
        f"tests/plugins/redfish/: these sit in a folder named after no room ({', '.join(sorted(allowed))}): "
        f"{misplaced}"
    )
    folders = {p.name for p in REDFISH_TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert not folders - allowed, (
        f"tests/plugins/redfish/: folders named after no room: {sorted(folders - allowed)}"
    )
    assert {m.relative_to(REDFISH_TESTS).parts[0] for m in modules} >= {"wire", "client", "platforms"}


def test_plugin_tests_sit_beside_their_plugin() -> None:
    """tests/plugins/ holds a folder per plugin of plugins/ (named as the package), plus the plugin
    hosts' tests; below a plugin's folder, a folder per room of the plugin (its name without the
    underscore) or corpus/ for the Redfish captures; no plugin keeps its tests in a second folder
    directly under tests/."""
    plugins = {p.name for p in PLUGINS.iterdir() if (p / "__init__.py").exists()}
    assert {"base", "nvml", "redfish"} <= plugins  # the scan sees the plugins
    folders = {p.name for p in PLUGIN_TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    strays = sorted(folders - plugins - PLUGIN_HOST_FOLDERS)
    assert not strays, f"tests/plugins/: folders named after no plugin: {strays}"
    for plugin in sorted(folders & plugins):
        rooms = {
            p.name.removeprefix("_") for p in (PLUGINS / plugin).iterdir() if (p / "__init__.py").exists()
        }
        extra = REDFISH_WHOLE_PLUGIN_FOLDERS if plugin == "redfish" else set()
        subfolders = {
            p.name for p in (PLUGIN_TESTS / plugin).iterdir() if p.is_dir() and p.name != "__pycache__"
        }
        assert subfolders <= rooms | extra, (
            f"tests/plugins/{plugin}/: folders named after no room of plugins/{plugin}: "
            f"{sorted(subfolders - rooms - extra)}"
        )
    seconds = {p.name for p in TESTS.iterdir() if p.is_dir()} & plugins
    assert not seconds, f"move these into tests/plugins/: {sorted(seconds)}"
