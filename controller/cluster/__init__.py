"""Several controllers on one database: which process runs each device, by shards leased with fencing
tokens, in `shards`, and which journaled requests this process claims and queues, and when, in
`claims` (docs/architecture.md, "Several controllers").
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.cluster.claims import Claims
    from controller.cluster.shards import ShardCountError, ShardLeases, Shards, shard_of

__all__ = ["Claims", "ShardCountError", "ShardLeases", "Shards", "shard_of"]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "Claims": "claims",
    "ShardCountError": "shards",
    "ShardLeases": "shards",
    "Shards": "shards",
    "shard_of": "shards",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
