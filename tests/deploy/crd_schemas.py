"""Validation of the Prometheus Operator's custom resources (ServiceMonitor, PrometheusRule), which
kubernetes-validate has no schema for: against the CRDs' own openAPIV3Schema, vendored under
tests/deploy/crds/ (each file's header says where it came from), with jsonschema.

An API server keeps an unknown field of a custom resource out silently (it prunes it): a
misspelt key would be lost, not refused. So the schema is made strict the way
``kubectl apply --validate=strict`` is, before use: an object schema with ``properties`` and
neither ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields`` admits no other key.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parent / "crds"
# (apiVersion, kind) -> the vendored schema file.
SCHEMA_FILES = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): CRDS / "monitoring.coreos.com_servicemonitors.v1.schema.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): CRDS / "monitoring.coreos.com_prometheusrules.v1.schema.yaml",
}


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every closed object schema refusing unknown keys (see the module doc)."""
    schema = dict(schema)
    if "properties" in schema:
        schema["properties"] = {name: strict(value) for name, value in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            schema[key] = strict(schema[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            schema[key] = [strict(item) for item in schema[key]]
    return schema


@functools.cache
def validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    # Draft 4, as Kubernetes' structural schemas are. The schema is not checked against the
    # metaschema: its patterns are Go's RE2 ("^(?i)(abort|warn)?$"), which Python's re refuses.
    return jsonschema.Draft4Validator(strict(yaml.safe_load(SCHEMA_FILES[(api_version, kind)].read_text())))


def has_schema(document: dict[str, Any]) -> bool:
    return (document.get("apiVersion"), document.get("kind")) in SCHEMA_FILES


def errors(document: dict[str, Any]) -> list[str]:
    """What the CRD's schema says about ``document`` (one line per error, with its path)."""
    found = validator(document["apiVersion"], document["kind"]).iter_errors(document)
    return sorted(f"{error.json_path.removeprefix('$.') or '<root>'}: {error.message}" for error in found)
