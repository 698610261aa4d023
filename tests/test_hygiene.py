"""Packaging hygiene: every pynvml name the NVML plugin uses exists in the installed nvidia-ml-py
(12.535.161, once the floor, lacks the workload-profile calls and failed on import), and the
declared dependencies match what the code imports."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pynvml
import setuptools

ROOT = Path(__file__).parents[1]


def _pynvml_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "plugins" / "nvml").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "pynvml"
            ):
                names.add(node.attr)
    return names


def test_installed_pynvml_has_every_name_the_nvml_plugin_uses() -> None:
    names = _pynvml_names()
    assert "nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1" in names  # the scan sees the plugin's calls
    missing = sorted(n for n in names if not hasattr(pynvml, n))
    assert not missing, f"nvidia-ml-py lacks {missing}: raise the floor in pyproject.toml"


def _project() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _declared() -> set[str]:
    deps = _project()["project"]["dependencies"]  # type: ignore[index]
    return {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower() for d in deps}  # type: ignore[union-attr]


def _imported_top_levels() -> set[str]:
    out: set[str] = set()
    for folder in ("controller", "plugins", "bmcsim"):
        for path in (ROOT / folder).rglob("*.py"):
            if "_proto" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    out.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    out.add(node.module.split(".")[0])
    return out


def test_declared_dependencies_match_imports() -> None:
    declared = _declared()
    imported = _imported_top_levels()
    assert "yarl" in imported and "yarl" in declared
    assert "grpc_status" not in imported and "grpcio-status" not in declared
    assert "prometheus-client" in declared


def test_license_is_an_spdx_string_and_bench_extras_are_separate() -> None:
    project = _project()
    assert project["project"]["license"] == "Apache-2.0"  # type: ignore[index]
    requires = project["build-system"]["requires"]  # type: ignore[index]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires)
    makefile = (ROOT / "Makefile").read_text()
    assert "-e '.[dev]'" in makefile  # `make setup`: what the demo and tests need
    assert re.search(r"^bench: \$\(BENCH_STAMP\)", makefile, re.M)


def test_only_the_project_packages_are_installed() -> None:
    """bench/ and drills/ are tools run from a checkout (`python -m drills`): setuptools' own package
    discovery, with pyproject's settings, must not put them (or tests/) in users' site-packages.
    bmcsim/ ships: the installed `devicectl bmc-sim`, `demo` and `certs` load it."""
    find = _project()["tool"]["setuptools"]["packages"]["find"]  # type: ignore[index]
    packages = setuptools.find_namespace_packages(
        where=str(ROOT), include=find["include"], exclude=find.get("exclude", ())
    )
    assert "bmcsim" in packages and "controller.store" in packages and "plugins.redfish" in packages
    assert {p.split(".")[0] for p in packages} == {"controller", "plugins", "migrations", "bmcsim"}
