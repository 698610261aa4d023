"""Smoke check of an installed devicectl, run by the installation's own Python from stdin:

    python -I - < deploy/image_smoke.py

deploy/check-image.sh runs it inside the image, tests/deploy/test_image_build.py in a virtual
environment built by the Dockerfile's steps. It checks that the `devicectl.plugins` entry points
of the installed distribution load plugin classes, and that importing every `controller`, `plugins`
and `bmcsim` module uses only the installed files: each module comes from the distribution, and no
file outside the Python path is opened (a data file read relative to the working directory or the
source tree shows up here; one missing from the package fails its import). One line per problem
and exit status 1; one "ok" line otherwise. Standard library only, no project imports before the
audit hook is in place.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from importlib.metadata import distribution

opened: list[str] = []


def _record(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and isinstance(args[0], str):
        opened.append(os.path.abspath(args[0]))


sys.addaudithook(_record)

PROJECT_PACKAGES = ("controller", "plugins", "bmcsim")
#: read by the standard library and dependencies (MIME types, /proc for process metrics)
SYSTEM_DIRS = ("/etc/", "/proc/", "/sys/", "/dev/")


def under(path: str, root: str) -> bool:
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/")


def import_all() -> tuple[list[str], list[str]]:
    """Every module of the project packages (imported), and one line per import failure."""
    names: list[str] = []
    problems: list[str] = []
    for top in PROJECT_PACKAGES:
        try:  # an installation that lacks one (an editable install made before bmcsim existed)
            package = importlib.import_module(top)
        except Exception as exc:
            problems.append(f"import {top}: {type(exc).__name__}: {exc}")
            continue
        names.append(top)
        # a package that fails to import is reported by the loop below (it is yielded first)
        for info in pkgutil.walk_packages(package.__path__, f"{top}.", onerror=lambda name: None):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue  # importing it runs the command line
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                problems.append(f"import {info.name}: {type(exc).__name__}: {exc}")
            else:
                names.append(info.name)
    return names, problems


def main() -> int:
    dist = distribution("devicectl")
    location = os.path.abspath(str(dist.locate_file("")))
    shipped = {os.path.abspath(str(dist.locate_file(f))) for f in dist.files or ()}
    names, problems = import_all()

    for name in names:
        origin = getattr(sys.modules.get(name), "__file__", None)
        if origin is None or os.path.abspath(origin) not in shipped:
            problems.append(f"module {name} comes from {origin}, not from the installed distribution")

    roots = [os.path.abspath(p) for p in sys.path if p]
    stray = sorted(
        {p for p in opened if not any(under(p, r) for r in roots) and not p.startswith(SYSTEM_DIRS)}
    )
    problems += [f"importing the project opened {p}, outside the installed packages" for p in stray]

    from plugins.base import DevicePlugin

    entry_points = sorted(dist.entry_points.select(group="devicectl.plugins"), key=lambda e: e.name)
    if not entry_points:
        problems.append("no devicectl.plugins entry points in the installed distribution")
    for ep in entry_points:
        try:
            cls = ep.load()
        except Exception as exc:
            problems.append(f"plugin {ep.name} = {ep.value}: {type(exc).__name__}: {exc}")
            continue
        if not (isinstance(cls, type) and issubclass(cls, DevicePlugin)):
            problems.append(f"plugin {ep.name} = {ep.value} is not a DevicePlugin subclass")

    for line in problems:
        print(f"image smoke: {line}")
    if problems:
        return 1
    plugin_names = ", ".join(ep.name for ep in entry_points)
    print(f"image smoke: ok ({len(names)} modules from {location}; plugins {plugin_names})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
