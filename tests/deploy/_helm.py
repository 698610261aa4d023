"""The chart rendered and linted by Helm itself: `helm-python-sdk` (a dev dependency) embeds Helm
v4's Go library, so no helm binary is needed. `render_chart` is `helm template`, `lint` is
`helm lint --strict`; both apply the chart's values.schema.json as Helm does."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import helm_python
import yaml
from helm_python import _native


class ChartFailure(ValueError):
    """Helm refused the values: the schema, or a template's `fail` (as `helm template` fails)."""


def _render(
    chart: Path, values: dict[str, Any] | None, release: str, api_versions: Iterable[str]
) -> dict[str, str]:
    options = {
        "name": release,
        "namespace": "default",
        "is_install": True,
        "api_versions": list(api_versions),
    }
    with helm_python.Chart.load(chart) as loaded:
        try:
            # NOTE: the library's render takes `api_versions` (helm template --api-versions), which
            # Chart.render does not pass on: called directly
            rendered: dict[str, str] = json.loads(
                _native.call_string(
                    "helm_render", loaded._raw(), json.dumps(values or {}), json.dumps(options)
                )
            )
        except (helm_python.HelmRenderError, helm_python.HelmValuesError) as exc:
            raise ChartFailure(str(exc)) from exc
    return rendered


def render_chart(
    chart: Path,
    values: dict[str, Any] | None = None,
    release: str = "test",
    api_versions: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Every manifest the chart renders with its values.yaml overridden by `values`, on a cluster
    that serves `api_versions` beyond the built-in ones (as `helm template --api-versions`)."""
    docs: list[dict[str, Any]] = []
    for name, text in sorted(_render(chart, values, release, api_versions).items()):
        if name.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def render_notes(chart: Path, values: dict[str, Any] | None = None, release: str = "test") -> str:
    """templates/NOTES.txt as `helm install` prints it."""
    return _render(chart, values, release, ())[f"{chart.name}/templates/NOTES.txt"]


def lint(chart: Path, values: dict[str, Any] | None = None) -> list[str]:
    """`helm lint --strict`: each finding above "info" (warnings count, as --strict makes them)."""
    report = helm_python.lint(chart, values, strict=True)
    return [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2] + list(
        report["errors"]
    )
