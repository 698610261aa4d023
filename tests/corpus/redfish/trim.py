"""Trim a capture of a real BMC to what a power controller reads, and write its SOURCES file.

    python tests/corpus/redfish/trim.py SRC DEST --repo OWNER/NAME --commit SHA --licence SPDX

SRC is a checkout of the capture: a DMTF mockup (`index.json` per resource) or a crawler's flat
directory of JSON responses (each placed by its `@odata.id`). From the service root, links are
followed only into the resources README.md lists (and every member of a kept collection); a
document holding an error (the firmware's answer was `ResourceMissingAtURI`) is left out and listed
as absent, so the simulator answers 404 for it as the firmware did. Contents are copied unchanged.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

ROOT = "/redfish/v1"
KEEP = [
    re.compile("^" + ROOT + p + "$")
    for p in (
        "",
        "/Systems",
        "/Systems/[^/]+",
        "/Systems/[^/]+/Processors",
        "/Systems/[^/]+/Processors/[^/]+",
        "/Systems/[^/]+/Processors/[^/]+/EnvironmentMetrics",
        "/Chassis",
        "/Chassis/[^/]+",
        "/Chassis/.+/Power",
        "/Chassis/.+/Controls",
        "/Chassis/.+/Controls/[^/]+",
        "/Chassis/.+/EnvironmentMetrics",
        "/Chassis/[^/]+/Power/AccPowerService",
        "/Chassis/[^/]+/Power/AccPowerService/PowerLimit",
        "/Managers",
        "/Managers/[^/]+",
    )
]


def load(source: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """Every JSON document of a capture by served path, with the file it came from."""
    docs: dict[str, tuple[dict[str, Any], str]] = {}
    mockup = (source / "index.json").is_file()
    for file in sorted(source.rglob("index.json" if mockup else "*.json")):
        try:
            body = json.loads(file.read_text())
        except ValueError:
            continue
        if not isinstance(body, dict):
            continue
        if mockup:
            relative = file.parent.relative_to(source).as_posix()
            path = ROOT if relative == "." else f"{ROOT}/{relative}"
        elif isinstance(body.get("@odata.id"), str):
            path = body["@odata.id"].rstrip("/")
        else:
            continue
        docs[path] = (body, file.relative_to(source).as_posix())
    return docs


def _links(body: Any) -> list[str]:
    out: list[str] = []
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "@odata.id" and isinstance(value, str):
                out.append(value.split("#")[0].rstrip("/"))
            else:
                out += _links(value)
    elif isinstance(body, list):
        for value in body:
            out += _links(value)
    return out


def trim(docs: dict[str, tuple[dict[str, Any], str]]) -> tuple[list[str], list[tuple[str, str]]]:
    """The kept paths and the absent ones (with why), walking from the service root."""
    seen: set[str] = set()
    queue, kept, absent = [ROOT], [], []
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if path not in docs:
            absent.append((path, "not in the capture"))
            continue
        body = docs[path][0]
        if "error" in body and "@odata.id" not in body:
            infos = body["error"].get("@Message.ExtendedInfo") or ()
            ids = ",".join(str(i.get("MessageId", "")) for i in infos if isinstance(i, dict))
            absent.append((path, f"captured answer: error {ids}"))
            continue
        kept.append(path)
        members = {
            str(m.get("@odata.id", "")).rstrip("/") for m in body.get("Members") or () if isinstance(m, dict)
        }
        queue += [
            link
            for link in _links(body)
            if link not in seen and (link in members or any(k.match(link) for k in KEEP))
        ]
    return kept, absent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--licence", required=True)
    parser.add_argument("--prefix", default="", help="the capture's folder inside its repository")
    args = parser.parse_args()
    docs = load(args.source)
    kept, absent = trim(docs)
    prefix = args.prefix.rstrip("/") + "/" if args.prefix else ""
    lines = [
        f"# {args.dest.name}: trimmed from {args.repo} at commit {args.commit} (licence {args.licence}).",
        "# Each resource below: <served path> <- <file in that repository>.",
        "# Only the resources a power controller reads are kept; contents are unchanged.",
        f"# Linked by the capture but absent from it (served as 404, as the firmware did): {len(absent)}",
        *(f"absent {path} ({why})" for path, why in sorted(absent)),
    ]
    for path in sorted(kept):
        body, origin = docs[path]
        target = args.dest / path[len(ROOT) :].lstrip("/") / "index.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(body, indent=1) + "\n")
        lines.append(f"{path} <- {prefix}{origin}")
    (args.dest / "SOURCES").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
