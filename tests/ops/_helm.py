"""A renderer for the subset of Helm's template language the devicectl chart uses, so tests can
render the chart without the helm binary (none installs from our registries); the manifests it
renders are then validated against Kubernetes' own schemas (tests/ops/test_chart_schemas.py).

It follows Go's text/template and Helm's functions (Sprig) for what it supports, and raises on
anything else, so the chart cannot drift beyond it:

- actions `{{ pipeline }}` with `{{-`/`-}}` trimming and `{{/* comments */}}`;
- `if` / `else` / `end`, `range $i := pipeline` (dot is the element, as in Go), `$` the root;
- pipelines `a | f x` (the piped value is the last argument) and parenthesised sub-pipelines;
- operands: `.Values.a.b`, `$.Values.a`, `$i`, "strings", integers, `true`/`false`, and the method
  `.Capabilities.APIVersions.Has "group/version/Kind"`;
- functions: quote, nindent, indent, toYaml, toString, int, add, until, print, sha256sum, default,
  eq, ne, gt, ge, lt, le, and, or, not, fail (raises `ChartFailure`, as `helm template` fails).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_TAG = re.compile(r"(\s*)\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_TOKEN = re.compile(r'\s*("(?:\\.|[^"\\])*"|\(|\)|\||:=|[^\s()|"]+)')


class ChartFailure(ValueError):
    """The chart refused its values (`fail`), as `helm template` would."""


# ---- parsing ----------------------------------------------------------------------------------


@dataclass
class _Node:
    kind: str  # text, action, if, range
    text: str = ""
    expr: str = ""
    var: str = ""
    body: list[_Node] = field(default_factory=list)
    orelse: list[_Node] = field(default_factory=list)


def _parse(template: str) -> list[_Node]:
    root: list[_Node] = []
    stack: list[tuple[_Node | None, list[_Node]]] = [(None, root)]
    pos = 0
    for m in _TAG.finditer(template):
        space, left_trim, expr, right_trim = m.groups()
        text = template[pos : m.start()] + ("" if left_trim else space)
        pos = m.end()
        if right_trim:
            while pos < len(template) and template[pos] in " \t\r\n":
                pos += 1
        stack[-1][1].append(_Node("text", text=text))
        word = expr.split()[0] if expr else ""
        if expr.startswith("/*"):
            if not expr.endswith("*/"):
                raise ValueError(f"unsupported comment {expr!r}")
        elif word == "if":
            node = _Node("if", expr=expr[2:].strip())
            stack[-1][1].append(node)
            stack.append((node, node.body))
        elif word == "range":
            m2 = re.fullmatch(r"range\s+(\$\w+)\s*:=\s*(.+)", expr, re.S)
            if not m2:
                raise ValueError(f"unsupported range {expr!r}")
            node = _Node("range", var=m2.group(1), expr=m2.group(2))
            stack[-1][1].append(node)
            stack.append((node, node.body))
        elif word == "else":
            owner, _ = stack.pop()
            if owner is None or owner.kind != "if" or expr != "else":
                raise ValueError(f"unsupported {expr!r}")
            stack.append((owner, owner.orelse))
        elif word == "end":
            if len(stack) == 1:
                raise ValueError("end without if or range")
            stack.pop()
        else:
            stack[-1][1].append(_Node("action", expr=expr))
    if len(stack) != 1:
        raise ValueError("unclosed if or range")
    root.append(_Node("text", text=template[pos:]))
    return root


# ---- evaluation -------------------------------------------------------------------------------


@dataclass
class _Scope:
    root: dict[str, Any]
    dot: Any
    variables: dict[str, Any]


class APIVersions:
    """`.Capabilities.APIVersions`: what the cluster serves ("v1", "apps/v1/Deployment", ...)."""

    def __init__(self, versions: Iterable[str]) -> None:
        self._versions = set(versions)

    def Has(self, version: str) -> bool:
        return version in self._versions


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and not (hasattr(value, "__len__") and len(value) == 0)


def _to_string(value: Any) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _print(*args: Any) -> str:
    # fmt.Sprint: a space between operands when neither is a string
    out = ""
    for i, arg in enumerate(args):
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out += " "
        out += _to_string(arg)
    return out


def _indent(n: int, text: Any) -> str:
    pad = " " * int(n)
    return "\n".join(pad + line if line else line for line in _to_string(text).split("\n"))


def _fail(message: str) -> None:
    raise ChartFailure(message)


def _int(value: Any) -> int:
    return int(value) if value not in (None, "") else 0


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quote": lambda v: '"' + _to_string(v).replace("\\", "\\\\").replace('"', '\\"') + '"',
    "nindent": lambda n, v: "\n" + _indent(n, v),
    "indent": _indent,
    "toYaml": lambda v: yaml.safe_dump(v, default_flow_style=False).rstrip("\n") if v is not None else "null",
    "toString": _to_string,
    "int": _int,
    "add": lambda *v: sum(_int(x) for x in v),
    "until": lambda n: list(range(int(n))),
    "print": _print,
    "sha256sum": lambda v: hashlib.sha256(_to_string(v).encode()).hexdigest(),
    "default": lambda d, v=None: v if _truthy(v) else d,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "not": lambda v: not _truthy(v),
    "fail": _fail,
}


def _tokens(expr: str) -> list[str]:
    out, pos = [], 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"unsupported expression {expr!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _pipeline(tokens: list[str], scope: _Scope) -> Any:
    value: Any = _NOTHING
    for command in _split(tokens, "|"):
        value = _command(command, scope, value)
    return value


_NOTHING = object()


def _split(tokens: list[str], sep: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for tok in tokens:
        depth += (tok == "(") - (tok == ")")
        if tok == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(tok)
    if any(not p for p in parts):
        raise ValueError(f"empty command in {' '.join(tokens)!r}")
    return parts


def _operands(tokens: list[str]) -> list[list[str]]:
    """Group a command's tokens: one token, or a parenthesised run."""
    out: list[list[str]] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "(":
            depth, j = 0, i
            while True:
                depth += (tokens[j] == "(") - (tokens[j] == ")")
                if depth == 0:
                    break
                j += 1
                if j == len(tokens):
                    raise ValueError("unbalanced parentheses")
            out.append(tokens[i : j + 1])
            i = j + 1
        else:
            out.append([tokens[i]])
            i += 1
    return out


def _command(tokens: list[str], scope: _Scope, piped: Any) -> Any:
    groups = _operands(tokens)
    head = groups[0]
    extra = [] if piped is _NOTHING else [piped]
    if len(head) == 1 and head[0] in ("and", "or"):
        args = [*groups[1:]]
        values = [lambda g=g: _operand(g, scope) for g in args] + [lambda: piped] * bool(extra)
        result: Any = None
        for get in values:  # short-circuit, returning the deciding operand (Go's and/or)
            result = get()
            if _truthy(result) == (head[0] == "or"):
                return result
        return result
    if len(head) == 1 and head[0] in FUNCTIONS:
        args = [_operand(g, scope) for g in groups[1:]] + extra
        return FUNCTIONS[head[0]](*args)
    value = _operand(head, scope)
    if callable(value):  # a method (APIVersions.Has)
        return value(*[_operand(g, scope) for g in groups[1:]], *extra)
    if len(groups) > 1 or extra:
        raise ValueError(f"unsupported expression {' '.join(tokens)!r}")
    return value


def _operand(group: list[str], scope: _Scope) -> Any:
    if group[0] == "(":
        return _pipeline(group[1:-1], scope)
    tok = group[0]
    if tok.startswith('"'):
        return bytes(tok[1:-1], "utf-8").decode("unicode_escape")
    if re.fullmatch(r"-?\d+", tok):
        return int(tok)
    if tok in ("true", "false"):
        return tok == "true"
    if tok.startswith("$"):
        name, _, rest = tok.partition(".")
        if name == "$":
            base: Any = scope.root
        elif name in scope.variables:
            base = scope.variables[name]
        else:
            raise KeyError(f"{tok}: no variable {name}")
        return _path(base, rest, tok)
    if tok == ".":
        return scope.dot
    if tok.startswith("."):
        return _path(scope.dot, tok[1:], tok)
    raise ValueError(f"unsupported function {tok!r}")


def _path(base: Any, path: str, expr: str) -> Any:
    value = base
    for part in path.split(".") if path else []:
        if isinstance(value, dict):
            if part not in value:
                raise KeyError(f"{expr}: no value {part!r}")
            value = value[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            raise KeyError(f"{expr}: no value {part!r}")
    return value


def _execute(nodes: list[_Node], scope: _Scope, out: list[str]) -> None:
    for node in nodes:
        if node.kind == "text":
            out.append(node.text)
        elif node.kind == "action":
            value = _pipeline(_tokens(node.expr), scope)
            if value is not None:
                out.append(_to_string(value))
        elif node.kind == "if":
            taken = _truthy(_pipeline(_tokens(node.expr), scope))
            _execute(node.body if taken else node.orelse, scope, out)
        elif node.kind == "range":
            for item in _pipeline(_tokens(node.expr), scope):
                inner = _Scope(scope.root, item, {**scope.variables, node.var: item})
                _execute(node.body, inner, out)


def render(template: str, scope: dict[str, Any]) -> str:
    out: list[str] = []
    _execute(_parse(template), _Scope(scope, scope, {}), out)
    return "".join(out)


# ---- the chart --------------------------------------------------------------------------------


def chart_scope(
    chart: Path,
    values: dict[str, Any] | None = None,
    release: str = "test",
    api_versions: Iterable[str] = (),
) -> dict[str, Any]:
    merged = yaml.safe_load((chart / "values.yaml").read_text())
    _merge(merged, values or {})
    return {
        "Values": merged,
        "Release": {"Name": release, "Namespace": "default", "Service": "Helm"},
        "Chart": yaml.safe_load((chart / "Chart.yaml").read_text()),
        "Capabilities": {"APIVersions": APIVersions(api_versions)},
    }


def render_chart(
    chart: Path,
    values: dict[str, Any] | None = None,
    release: str = "test",
    api_versions: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Every manifest the chart renders with its values.yaml overridden by `values`, on a cluster
    that serves `api_versions` beyond the built-in ones (as `helm template --api-versions`)."""
    scope = chart_scope(chart, values, release, api_versions)
    docs: list[dict[str, Any]] = []
    for template in sorted((chart / "templates").glob("*.yaml")):
        text = render(template.read_text(), scope)
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def render_notes(chart: Path, values: dict[str, Any] | None = None, release: str = "test") -> str:
    """templates/NOTES.txt as `helm install` prints it."""
    return render((chart / "templates" / "NOTES.txt").read_text(), chart_scope(chart, values, release))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
