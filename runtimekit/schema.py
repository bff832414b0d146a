"""The one schema mechanism: keys declared once, validated with errors that name the key and the rule.

Two forms, one set of rules and messages:

- **Settings** (the agent's and the remediation service's configuration, the health thresholds):
  a frozen dataclass per section whose fields are declared with ``setting(default, doc, check,
  allowed)``; the field's type annotation is the key's type. ``schema_of(cls)`` derives the flat
  schema of dotted keys (``sampling.interval_seconds``) from the dataclasses — nothing is listed a
  second time — and ``build(cls, values)`` makes the validated, typed object.
- **Shapes** (scenarios, webhook payloads): nested mappings and lists described by example —
  ``{"name": str, "description?": str, "gpus": [{"index": int}]}`` — checked by ``check_shape``
  with the path of the offending value (``gpus[3].index``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

Check = Callable[[Any], "str | None"]  # returns an error text, or None when the value is valid


class ConfigError(ValueError):
    """Invalid configuration or data; the message names the key and the rule."""


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """One key: its accepted types, default, validation and documentation."""

    kind: type | tuple[type, ...]
    default: Any
    doc: str
    check: Check | None = None
    allowed: tuple[Any, ...] | None = None


def between(low: float, high: float) -> Check:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


# -- settings: dataclasses whose fields are the keys ----------------------------------------------

def setting(default: Any, doc: str, check: Check | None = None, allowed: tuple[Any, ...] | None = None) -> Any:
    """A dataclass field that is a key of the schema (its type comes from the annotation)."""
    metadata = {"doc": doc, "check": check, "allowed": allowed}
    if isinstance(default, Mapping):
        frozen = dict(default)
        return dataclasses.field(default_factory=lambda: types.MappingProxyType(dict(frozen)), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(cls: type) -> Any:
    """A dataclass field holding a section (its keys are ``<field name>.<key>``)."""
    return dataclasses.field(default_factory=cls, metadata={"section": True})


def _kinds(annotation: Any) -> tuple[type, ...]:
    """The runtime types a key of this annotation accepts (an int is a valid float, as YAML has it)."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        return tuple(kind for arg in typing.get_args(annotation) for kind in _kinds(arg))
    if annotation is type(None) or annotation is None:
        return (type(None),)
    if annotation is float:
        return (int, float)
    if origin is not None and issubclass(origin, Mapping) or annotation is dict:
        return (dict,)
    return (annotation,)


def schema_of(cls: type, prefix: str = "") -> dict[str, Key]:
    """The flat schema (dotted key -> Key) of a settings dataclass and its sections."""
    hints = typing.get_type_hints(cls)
    schema: dict[str, Key] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("section"):
            schema.update(schema_of(hints[f.name], f"{prefix}{f.name}."))
        elif "doc" in f.metadata:
            factory = f.default_factory
            default = factory() if callable(factory) else f.default
            schema[f"{prefix}{f.name}"] = Key(
                _kinds(hints[f.name]), default, f.metadata["doc"], f.metadata["check"], f.metadata["allowed"]
            )
    return schema


def build(cls: type, values: Mapping[str, Any], prefix: str = "", **extra: Any) -> Any:
    """An instance of the settings dataclass ``cls`` from validated dotted ``values``."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = dict(extra)
    for f in dataclasses.fields(cls):
        if f.metadata.get("section"):
            kwargs[f.name] = build(hints[f.name], values, f"{prefix}{f.name}.")
        elif "doc" in f.metadata and f"{prefix}{f.name}" in values:
            value = values[f"{prefix}{f.name}"]
            kwargs[f.name] = types.MappingProxyType(dict(value)) if isinstance(value, dict) else value
    return cls(**kwargs)


def value_at(settings: Any, key: str) -> Any:
    """The value of dotted ``key`` in a settings object (``value_at(config, "sampling.interval_seconds")``)."""
    for part in key.split("."):
        settings = getattr(settings, part)
    return settings


# -- validating and reading ------------------------------------------------------------------------

def flatten(data: Mapping[str, Any], schema: Mapping[str, Key], prefix: str = "") -> dict[str, Any]:
    """Nested YAML mappings -> dotted keys (``sampling.interval_seconds``); a mapping-valued key
    of ``schema`` (``exporter.collectors``) stays whole."""
    flat: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if not isinstance(name, str):
            raise ConfigError(f"{key!r}: keys must be strings")
        if isinstance(value, dict) and key not in schema:
            flat.update(flatten(value, schema, f"{key}."))
        else:
            flat[key] = value
    return flat


def validate(schema: Mapping[str, Key], key: str, value: Any) -> Any:
    """``value`` for ``key`` if the schema allows it; else ConfigError naming the key and the rule."""
    spec = schema.get(key)
    if spec is None:
        raise ConfigError(f"{key}: unknown key; allowed keys are {', '.join(sorted(schema))}")
    kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
    check_type(key, value, kinds)
    if spec.allowed is not None and value not in spec.allowed:
        raise ConfigError(f"{key}: must be one of {', '.join(map(str, spec.allowed))}, got {value!r}")
    if spec.check is not None and value is not None:
        problem = spec.check(value)
        if problem:
            raise ConfigError(f"{key}: {problem}, got {value!r}")
    return value


def check_type(where: str, value: Any, kinds: tuple[type, ...], error: type[ValueError] = ConfigError) -> None:
    """Raise ``error`` naming ``where`` when ``value`` is none of ``kinds`` (a bool is no number here)."""
    if isinstance(value, bool) and bool not in kinds:  # bool is an int in Python; not here
        raise error(f"{where}: must be {type_names(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise error(f"{where}: must be {type_names(kinds)}, got {type(value).__name__} {value!r}")


def type_names(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", dict: "a mapping", list: "a list",
             bool: "true or false", type(None): "null"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def read_mapping(path: str | Path, what: str = "--config") -> dict[str, Any]:
    """The YAML file at ``path`` as a mapping (ConfigError when unreadable, not YAML or not a mapping)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"{what}: cannot read {path}: {error.strerror}") from error
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{what}: {path} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: {path} must hold a mapping at the top level")
    return data


def resolve(
    schema: Mapping[str, Key], path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every key of ``schema``: its default, the file's value, then a non-None override; validated."""
    values = {key: spec.default for key, spec in schema.items()}
    if path is not None:
        for key, value in flatten(read_mapping(path), schema).items():
            values[key] = validate(schema, key, value)
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = validate(schema, key, value)
    return values


# -- shapes: nested data described by example -----------------------------------------------------

def check_shape(value: Any, shape: Any, path: str = "", error: type[ValueError] = ConfigError) -> None:
    """Raise ``error`` naming the path when ``value`` does not match ``shape``.

    A shape is a type or tuple of types (a leaf), ``[item_shape]`` (a list of items), or a mapping of
    key -> shape where a key ending in ``?`` is optional; unknown keys are refused (the path's
    ``x-`` keys at the top level are free, for comments)."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise error(f"{path or 'document'}: expected a mapping, got {type(value).__name__}")
        allowed = {k.rstrip("?"): k.endswith("?") for k in shape}
        for key in value:
            if not isinstance(key, str):
                raise error(f"{path or 'document'}: keys must be strings, got {key!r}")
            if path == "" and key.startswith("x-"):
                continue
            if key not in allowed:
                raise error(f"{_join(path, key)}: unknown key (allowed: {', '.join(sorted(allowed))})")
        for key, optional in allowed.items():
            if key not in value:
                if not optional:
                    raise error(f"{_join(path, key)}: required key is missing")
                continue
            check_shape(value[key], shape[key + "?" if optional else key], _join(path, key), error)
        return
    if isinstance(shape, list):
        if not isinstance(value, list):
            raise error(f"{path}: expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            check_shape(item, shape[0], f"{path}[{i}]", error)
        return
    check_type(path, value, shape if isinstance(shape, tuple) else (shape,), error)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
