"""The import graph of the shipped code (controller/, plugins/, bmcsim/) and the repository's tools
(bench/, drills/), read with `ast` from the source: no import circles, type-only and function-local
imports included; plugins never import the controller nor the BMC simulator, the simulator imports
neither of them, and the controller loads the simulator only inside the commands that need it; the
Redfish plugin's rooms import only the rooms below them; no module imports another package's private
(`_`-prefixed) module (tests/ and bench/ excepted: they look inside what they check). Module size
follows the concept: there is no line cap.

An edge is "module A imports module B", B resolved to the file that the import loads: for
`from a.b import c` that is `a/b/c.py` when it exists, else `a/b/__init__.py`. The parent packages'
`__init__` files, which Python runs first, are not edges: a package that re-exports its own modules
would otherwise be a circle with each of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
FOLDERS = ("controller", "plugins", "bmcsim", "bench", "drills")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module the import loads
    line: int
    local: bool = False  # inside a function: loaded when it runs, not with the module


def modules(root: Path, folders: tuple[str, ...]) -> dict[str, Path]:
    """Dotted name -> file, for every Python file under `folders`."""
    found = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The longest prefix of `name` that is one of `known` (None: outside the scanned folders)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(root: Path, folders: tuple[str, ...]) -> Iterator[Import]:
    """Every import statement, wherever it stands (module level, `if TYPE_CHECKING:`, a function)."""
    known = modules(root, folders)
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
        local = {id(n) for f in functions for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = _resolve(name, known)
                if target is not None and target != module:
                    yield Import(module, target, node.lineno, id(node) in local)


def circles(edges: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def graph(root: Path, folders: tuple[str, ...]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in modules(root, folders)}
    for imp in imports(root, folders):
        edges[imp.module].add(imp.target)
    return edges


def _describe(circle: frozenset[str], edges: Mapping[str, set[str]]) -> str:
    inside = [f"{a} -> {b}" for a in sorted(circle) for b in sorted(edges[a] & circle)]
    return "; ".join(inside)


def test_no_import_circles() -> None:
    edges = graph(ROOT, FOLDERS)
    assert len(edges) > 200 and "controller.store" in edges["controller.app"]  # the scan sees the code
    found = [_describe(c, edges) for c in circles(edges)]
    assert not found, "import circles (break them; type-only imports count too):\n" + "\n".join(found)


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_sees_type_only_function_local_and_relative_imports(tmp_path: Path) -> None:
    """The scan on a made-up tree: every kind of import the real check must not miss."""
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\n",
            "pkg/a.py": "import typing\nif typing.TYPE_CHECKING:\n    from pkg.b import B\nA = 1\n",
            "pkg/b.py": "from . import a\nB = 2\n",
            "pkg/c.py": "def late():\n    import pkg.d\n",
            "pkg/d.py": "from .sub import e\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/e.py": "from ..c import late\nimport os\n",
            "pkg/f.py": "from pkg import a, b\n",
        },
    )
    edges = graph(root, ("pkg",))
    assert edges["pkg.f"] == {"pkg.a", "pkg.b"}  # `from pkg import a` loads pkg/a.py
    assert edges["pkg"] == {"pkg.a"} and edges["pkg.sub.e"] == {"pkg.c"}  # os is not scanned
    assert sorted(sorted(c) for c in circles(edges)) == [
        ["pkg.a", "pkg.b"],  # type-only
        ["pkg.c", "pkg.d", "pkg.sub.e"],  # function-local and relative, through a subpackage
    ]


def crossings(root: Path, importer: str, imported: str, *, local: bool = True) -> list[str]:
    """Imports from the top-level package `importer` into `imported` (`local=False`: only those that
    load with the module, outside any function)."""
    return [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for imp in imports(root, (importer, imported))
        if imp.module.split(".")[0] == importer
        and imp.target.split(".")[0] == imported
        and (local or not imp.local)
    ]


def controller_imports_under_plugins(root: Path) -> list[str]:
    return crossings(root, "plugins", "controller")


def test_plugins_never_import_the_controller() -> None:
    found = controller_imports_under_plugins(ROOT)
    assert not found, "plugins import the controller:\n" + "\n".join(found)


def test_the_plugin_check_sees_a_controller_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "controller/__init__.py": "",
            "controller/_proto/__init__.py": "",
            "controller/_proto/x_pb2.py": "",
            "plugins/__init__.py": "",
            "plugins/ok.py": "import json\nfrom plugins import __name__ as n\n",
            "plugins/bad.py": "def f():\n    from controller._proto import x_pb2\n",
        },
    )
    assert controller_imports_under_plugins(root) == ["plugins.bad:2 imports controller._proto.x_pb2"]


def test_the_plugins_and_the_simulator_never_import_each_other() -> None:
    """The simulator imitates a BMC on its own: the plugin shipped to production never loads it, and
    it never borrows the plugin's code or the controller's (a bug they shared would hide itself)."""
    for importer, imported in (("plugins", "bmcsim"), ("bmcsim", "plugins"), ("bmcsim", "controller")):
        found = crossings(ROOT, importer, imported)
        assert not found, f"{importer} imports {imported}:\n" + "\n".join(found)


def test_the_controller_loads_the_simulator_only_in_the_commands_that_need_it() -> None:
    eager = crossings(ROOT, "controller", "bmcsim", local=False)
    assert not eager, "import bmcsim inside the command that needs it:\n" + "\n".join(eager)
    lazy = {line.split(":")[0] for line in crossings(ROOT, "controller", "bmcsim")}
    assert {
        "controller.cli",
        "controller.cli._demo",
        "controller.security.certs",
    } <= lazy  # the scan sees them


def test_the_crossing_check_tells_a_module_level_import_from_a_local_one(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "bmcsim/__init__.py": "",
            "bmcsim/cli.py": "",
            "plugins/__init__.py": "",
            "plugins/eager.py": "import bmcsim\n",
            "plugins/lazy.py": "async def f():\n    from bmcsim import cli\n",
        },
    )
    assert crossings(root, "plugins", "bmcsim") == [
        "plugins.eager:1 imports bmcsim",
        "plugins.lazy:2 imports bmcsim.cli",
    ]
    assert crossings(root, "plugins", "bmcsim", local=False) == ["plugins.eager:1 imports bmcsim"]


#: the Redfish plugin's rooms and top-level modules, from the wire up (docs/architecture.md, "Inside
#: the Redfish plugin"): each imports only those before it
REDFISH_ORDER = (
    "_config",
    "_wire",
    "_client",
    "_discovery",
    "_platforms",
    "_device",
    "_capping",
    "_readings",
    "_verify",
    "_plugin_config",
    "_plugin",
)
#: the one exception: discovery asks the platform modules to build the result whose model they fill
REDFISH_LEANING = {("_discovery", "_platforms")}


def upward_imports(root: Path, order: tuple[str, ...], allowed: set[tuple[str, str]]) -> list[str]:
    """Imports inside plugins/redfish/ from a room (or top-level module) to one after it in `order`."""
    found = []
    for imp in imports(root, ("plugins",)):
        a, b = imp.module.split("."), imp.target.split(".")
        if a[:2] != ["plugins", "redfish"] or b[:2] != ["plugins", "redfish"] or len(a) < 3 or len(b) < 3:
            continue
        here, there = a[2], b[2]
        unknown = [r for r in (here, there) if r not in order]
        if unknown:
            found.append(f"{imp.module}:{imp.line}: place {unknown[0]} in the order of the rooms")
        elif order.index(there) > order.index(here) and (here, there) not in allowed:
            found.append(f"{imp.module}:{imp.line} imports {imp.target}, a room above it")
    return found


def test_each_redfish_room_imports_only_the_rooms_below_it() -> None:
    assert len(list(imports(ROOT, ("plugins",)))) > 300  # the scan sees the plugin
    found = upward_imports(ROOT, REDFISH_ORDER, REDFISH_LEANING)
    assert not found, "the Redfish plugin's rooms are layered:\n" + "\n".join(found)


def test_the_room_order_check_sees_an_import_upwards(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "plugins/__init__.py": "",
            "plugins/redfish/__init__.py": "from plugins.redfish._top import x\n",
            "plugins/redfish/_top.py": "from plugins.redfish._low.a import y\n",
            "plugins/redfish/_low/__init__.py": "",
            "plugins/redfish/_low/a.py": "def f():\n    from plugins.redfish._top import x\n",
            "plugins/redfish/_low/b.py": "from plugins.redfish._new import z\n",
            "plugins/redfish/_new.py": "",
        },
    )
    assert upward_imports(root, ("_low", "_top"), set()) == [
        "plugins.redfish._low.a:2 imports plugins.redfish._top, a room above it",
        "plugins.redfish._low.b:1: place _new in the order of the rooms",
    ]
    assert upward_imports(root, ("_low", "_top", "_new"), {("_low", "_top")}) == [
        "plugins.redfish._low.b:1 imports plugins.redfish._new, a room above it"
    ]


#: generated protobuf stubs (proto/generate.py places them): the wire contract of whoever speaks the
#: protocol, outside the privacy rule (docs/architecture.md, "Imports")
GENERATED = ("controller._proto", "plugins._proto")


def owner_of(target: str) -> str | None:
    """The package a module is private to: the one holding its first `_`-prefixed name part (None:
    a public module). `plugins.base._types` is private to `plugins.base`; `plugins.redfish._wire.errors`
    to `plugins.redfish`."""
    parts = target.split(".")
    for at, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:at])
    return None


def private_reaches(root: Path, folders: tuple[str, ...]) -> list[str]:
    """Imports of a private module from outside the package it is private to."""
    found = []
    for imp in imports(root, folders):
        owner = owner_of(imp.target)
        if owner is None or imp.target.startswith(GENERATED):
            continue
        if imp.module != owner and not imp.module.startswith(owner + "."):
            found.append(f"{imp.module}:{imp.line} imports {imp.target}, private to {owner}")
    return list(dict.fromkeys(found))  # `from m import a, b`: one line


#: bench/ measures a package's insides as its tests do (tests/ is not scanned): both may import it
PUBLIC_ONLY = ("controller", "plugins", "bmcsim", "drills")


def test_no_module_imports_another_packages_private_module() -> None:
    """A module whose name starts with `_` is private to its package: only that package's modules
    import it; what another package needs is exported by the package's `__init__` or lives in a
    public module."""
    assert any(imp.target == "plugins.base.codec" for imp in imports(ROOT, PUBLIC_ONLY))  # it scans
    found = private_reaches(ROOT, PUBLIC_ONLY)
    assert not found, "import the package's public names instead:\n" + "\n".join(found)


def test_the_privacy_check_sees_a_reach_into_another_package(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "plugins/__init__.py": "",
            "plugins/_proto/__init__.py": "",
            "plugins/base/__init__.py": "from plugins.base._types import T\n",
            "plugins/base/_types.py": "T = 1\n",
            "plugins/base/codec.py": "from . import _types\n",
            "plugins/nvml/__init__.py": "from plugins.base import codec, T\nfrom plugins import _proto\n",
            "plugins/nvml/_state.py": "def f():\n    from plugins.base import _types\n",
            "plugins/nvml/_room/__init__.py": "",
            "plugins/nvml/_room/a.py": "from plugins.nvml import _state\nimport plugins.base._types\n",
            "plugins/nvml/_room/b.py": "from plugins.base._types import T, U\n",
        },
    )
    assert private_reaches(root, ("plugins",)) == [
        "plugins.nvml._room.a:2 imports plugins.base._types, private to plugins.base",
        "plugins.nvml._room.b:1 imports plugins.base._types, private to plugins.base",
        "plugins.nvml._state:2 imports plugins.base._types, private to plugins.base",
    ]


def imports_of(root: Path, folder: str, name: str) -> list[str]:
    """Where a module under `folder` imports the module `name` (or one of its submodules), in any
    form: `import name`, `import name as x`, `from name import y`, at module level or in a function."""
    found = []
    for path in sorted((root / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            if any(t == name or t.startswith(name + ".") for t in targets):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_command_line_is_click_only() -> None:
    """`devicectl` parses with Click alone: handlers take Click's parameters (`controller.cli._options`),
    not an argparse namespace, and no command keeps a parser of its own."""
    assert imports_of(ROOT, "controller/cli", "click")  # the scan sees the command line's imports
    found = imports_of(ROOT, "controller/cli", "argparse")
    assert not found, "controller/cli uses Click only; argparse imported at:\n" + "\n".join(found)


def test_the_click_only_check_sees_every_form_of_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "controller/cli/a.py": "import argparse\n",
            "controller/cli/b.py": "import os, argparse as ap\n",
            "controller/cli/c.py": "def f():\n    from argparse import Namespace\n",
            "controller/cli/d.py": "import argparse_extras\nfrom . import argparse\n# import argparse\n",
        },
    )
    assert imports_of(root, "controller/cli", "argparse") == [
        "controller/cli/a.py:1",
        "controller/cli/b.py:1",
        "controller/cli/c.py:2",
    ]


#: the one module under plugins/ that knows DMTF's `redfish.aio` client (`plugins.redfish._wire.dmtf`)
DMTF_ADAPTER = Path("plugins/redfish/_wire/dmtf.py")


def dmtf_private_names() -> set[str]:
    """The private names of DMTF's `redfish.aio` (the attributes and methods its classes keep to
    themselves), read from the installed library's source."""
    import redfish.aio

    names = set()
    for path in Path(redfish.aio.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and _is_self(node.value):
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def dmtf_seam_breaches(root: Path, private: set[str]) -> list[str]:
    """Where a module under plugins/ goes round the DMTF adapter: `sys.modules` touched; the library's
    client named outside the adapter; one of the library's private names read or written on an object
    that is not the module's own `self` (`client._session_key`, `self._redfish._session_location`,
    `getattr(client, "_session_location")`)."""
    found = []
    for path in sorted((root / "plugins").rglob("*.py")):
        where = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            why = ""
            if isinstance(node, ast.Attribute):
                if node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id == "sys":
                    why = "sys.modules"
                elif node.attr in private and not _is_self(node.value):
                    why = f"private .{node.attr}"
                elif node.attr == "AsyncRedfishClient" and where != DMTF_ADAPTER:
                    why = "AsyncRedfishClient outside the adapter"
            elif isinstance(node, ast.Name) and node.id == "AsyncRedfishClient" and where != DMTF_ADAPTER:
                why = "AsyncRedfishClient outside the adapter"
            elif isinstance(node, ast.ImportFrom) and where != DMTF_ADAPTER:
                if any(alias.name == "AsyncRedfishClient" for alias in node.names):
                    why = "AsyncRedfishClient outside the adapter"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                named = node.args[1] if node.func.id in ("getattr", "setattr", "hasattr", "delattr") else None
                if isinstance(named, ast.Constant) and named.value in private and len(node.args) > 1:
                    why = f"private {named.value!r} by name"
            if why:
                found.append(f"{where}:{node.lineno}: {why}")
    return sorted(found)


def test_plugins_use_the_dmtf_library_through_its_public_interface_only() -> None:
    """DMTF's `redfish.aio` is reached only through its adapter, which uses only its public
    interface (docs/redfish.md, "The DMTF library")."""
    private = dmtf_private_names()
    assert {"_session_key", "_session_location", "_refresh_session", "_resolve_url"} <= private
    found = dmtf_seam_breaches(ROOT, private)
    assert not found, "plugins/ goes round the DMTF adapter at:\n" + "\n".join(found)


def test_the_dmtf_seam_check_sees_each_way_round_the_adapter(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "plugins/redfish/_wire/dmtf.py": (
                "from redfish.aio import AsyncRedfishClient\n"
                "class DmtfClient:\n"
                "    def token(self):\n"
                "        return self._client._session_key\n"
            ),
            "plugins/redfish/_wire/bare.py": "import sys\nsys.modules['redfish'] = object()\n",
            "plugins/redfish/_client/client.py": (
                "from redfish.aio import AsyncRedfishClient as Library\n"
                "def f(client, wrapper):\n"
                "    wrapper._redfish._session_location = None\n"
                "    return getattr(client, '_session_location', None), client._refresh_session\n"
            ),
            "plugins/redfish/_client/fine.py": (
                "class Mine:\n    def f(self, client):\n        return self._session_key, client.token\n"
            ),
        },
    )
    assert dmtf_seam_breaches(root, dmtf_private_names()) == [
        "plugins/redfish/_client/client.py:1: AsyncRedfishClient outside the adapter",
        "plugins/redfish/_client/client.py:3: private ._session_location",
        "plugins/redfish/_client/client.py:4: private '_session_location' by name",
        "plugins/redfish/_client/client.py:4: private ._refresh_session",
        "plugins/redfish/_wire/bare.py:2: sys.modules",
        "plugins/redfish/_wire/dmtf.py:4: private ._session_key",
    ]
