"""A renderer for the subset of Helm's template language the devicectl chart uses, so tests can
render and validate the chart without the helm binary (none installs from our registries).

Supported: `{{ .Values.a.b }}`, `.Release.Name`, `.Chart.*`, `| quote`, `| nindent N`,
`toYaml X | nindent N`, `{{- if X }}`, `{{- if eq X "lit" }}`, `{{- if ne X "lit" }}`,
`{{- if gt (int X) N }}`, `{{- else }}`, `{{- end }}`, `{{ fail "message" }}` (raises `ChartFailure`,
as `helm template` fails) and the `{{-`/`-}}` whitespace trimming. Anything else raises, so the
chart cannot drift beyond it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

_TAG = re.compile(r"(\s*)\{\{(-?)\s*(.*?)\s*(-?)\}\}")
_INT = re.compile(r"^\(int (\S+)\)$")


class ChartFailure(ValueError):
    """The chart refused its values (`fail`), as `helm template` would."""


def _lookup(path: str, scope: dict[str, Any]) -> Any:
    if not path.startswith("."):
        raise ValueError(f"unsupported expression {path!r}")
    value: Any = scope
    for part in path[1:].split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"{path}: no value {part!r}")
        value = value[part]
    return value


def _value(expr: str, scope: dict[str, Any]) -> Any:
    stages = [s.strip() for s in expr.split("|")]
    head = stages[0].split()
    if head[0] == "toYaml":
        value: Any = yaml.safe_dump(_lookup(head[1], scope), default_flow_style=False).rstrip("\n")
    elif len(head) == 1:
        value = _lookup(head[0], scope)
    else:
        raise ValueError(f"unsupported expression {expr!r}")
    for stage in stages[1:]:
        name, *args = stage.split()
        if name == "quote":
            value = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif name == "nindent":
            pad = " " * int(args[0])
            value = "\n" + "\n".join(
                pad + line if line else line for line in str(value).rstrip("\n").split("\n")
            )
        else:
            raise ValueError(f"unsupported function {name!r}")
    return value


def _truth(expr: str, scope: dict[str, Any]) -> bool:
    parts = expr.split()
    if parts[0] in ("eq", "ne") and len(parts) == 3:
        return (str(_lookup(parts[1], scope)) == parts[2].strip('"')) == (parts[0] == "eq")
    if parts[0] == "gt" and len(parts) == 4 and (m := _INT.match(" ".join(parts[1:3]))):
        return int(_lookup(m.group(1), scope)) > int(parts[3])
    if len(parts) == 1:
        return bool(_lookup(parts[0], scope))
    raise ValueError(f"unsupported condition {expr!r}")


def render(template: str, scope: dict[str, Any]) -> str:
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch active, the enclosing branch active)
    pos = 0
    for m in _TAG.finditer(template):
        space, left_trim, expr, right_trim = m.groups()
        text = template[pos : m.start()] + ("" if left_trim else space)
        active = all(a for a, _ in stack)
        if active:
            out.append(text)
        pos = m.end()
        if right_trim:
            while pos < len(template) and template[pos] in " \t\n":
                pos += 1
        word = expr.split()[0] if expr else ""
        if word == "if":
            stack.append((_truth(expr[2:].strip(), scope) if active else False, active))
        elif word == "else":
            taken, outer = stack.pop()
            stack.append((outer and not taken, outer))
        elif word == "end":
            stack.pop()
        elif word == "fail" and active:
            raise ChartFailure(expr[4:].strip().strip('"'))
        elif active:
            out.append(str(_value(expr, scope)))
    if stack:
        raise ValueError("unclosed if")
    out.append(template[pos:])
    return "".join(out)


def render_chart(
    chart: Path, values: dict[str, Any] | None = None, release: str = "test"
) -> list[dict[str, Any]]:
    """Every manifest the chart renders with its values.yaml overridden by `values`."""
    merged = yaml.safe_load((chart / "values.yaml").read_text())
    _merge(merged, values or {})
    scope = {
        "Values": merged,
        "Release": {"Name": release},
        "Chart": yaml.safe_load((chart / "Chart.yaml").read_text()),
    }
    docs: list[dict[str, Any]] = []
    for template in sorted((chart / "templates").glob("*.yaml")):
        text = render(template.read_text(), scope)
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
