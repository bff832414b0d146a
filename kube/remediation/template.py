"""The spare-node request's body: ``replacement.body_template`` filled in, and checked at start.

A string exactly ``"{name}"`` becomes the field's value (so the GPU lists stay JSON lists); any
other string is formatted with ``str.format`` (lists joined with ``,``). Only the names in
``FIELDS`` exist; ``template_problem`` refuses a template naming another one (or a malformed
``{...}``) when the configuration is loaded, so a mistake stops the service (exit 2) instead of
failing the first real replacement. Pure: no I/O.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

# name -> what it holds (the values replacement_body fills in, actions.py)
FIELDS: dict[str, str] = {
    "node": "the Kubernetes node",
    "gpu_uuids": "list of the GPU UUIDs (the alert's uuid label)",
    "gpu_indices": "list of the GPU indices (the alert's gpu label)",
    "fault": "the fault (the alert's fault label, else its alertname)",
    "fingerprint": "the alert's fingerprint",
    "starts_at": "when the alert started (RFC 3339)",
}
_SAMPLE: dict[str, Any] = {name: ["x"] if name.startswith("gpu_") else "x" for name in FIELDS}


def render(template: Any, fields: Mapping[str, Any]) -> Any:
    """Fill a JSON template: a string exactly "{name}" becomes the value (lists stay lists)."""
    if isinstance(template, Mapping):
        return {k: render(v, fields) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, fields) for v in template]
    if isinstance(template, str):
        if template.startswith("{") and template.endswith("}") and template[1:-1] in fields:
            return fields[template[1:-1]]
        return template.format_map({k: v if isinstance(v, str) else ",".join(v) for k, v in fields.items()})
    return template


def _strings(template: Any, where: str) -> list[tuple[str, str]]:
    if isinstance(template, Mapping):
        return [s for k, v in template.items() for s in _strings(v, f"{where}.{k}" if where else str(k))]
    if isinstance(template, list):
        return [s for i, v in enumerate(template) for s in _strings(v, f"{where}[{i}]")]
    return [(where, template)] if isinstance(template, str) else []


def template_problem(template: Mapping[str, Any]) -> str | None:
    """Why ``template`` cannot be rendered (for ``runtimekit.schema.Key.check``), or None."""
    for where, text in _strings(template, ""):
        try:
            names = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
        except ValueError as error:
            return f"entry {where}: {error} (write {{{{ and }}}} for literal braces)"
        for name in names:
            if name not in FIELDS:
                return f"entry {where}: unknown field {{{name}}}; the fields are {', '.join(FIELDS)}"
        try:
            render(text, _SAMPLE)
        except (ValueError, TypeError) as error:  # a format spec that does not fit a string
            return f"entry {where}: {error}"
    return None
