"""`redfish.aio` without the DMTF package's synchronous client (imported for that side effect,
before any module that imports `redfish.aio`).

The package's `__init__` loads its synchronous client (`requests`, `urllib3` and their
dependencies: ~5 MB of a serving controller's memory and ~150 modules it never uses). Here the
package is registered bare, so `redfish.aio` loads alone; the first use of a name only that
`__init__` defines (`redfish.redfish_client`, `from redfish import AuthMethod`) runs it then.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any


def _register_bare_package() -> None:
    if "redfish" in sys.modules:
        return
    spec = importlib.util.find_spec("redfish")
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(name: str) -> Any:
        del package.__getattr__  # once: the package's own names from now on
        loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = complete  # type: ignore[method-assign]
    sys.modules["redfish"] = package


_register_bare_package()
