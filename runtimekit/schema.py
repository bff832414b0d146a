"""The one schema mechanism: keys declared once, validated with errors that name the key and the rule.

Three forms, one set of rules and messages:

- **Settings** (the agent's and the remediation service's configuration, the health thresholds):
  a frozen dataclass per section whose fields are declared with ``setting(default, doc, check,
  allowed)``; the field's type annotation is the key's type. ``schema_of(cls)`` derives the flat
  schema of dotted keys (``sampling.interval_seconds``) from the dataclasses — nothing is listed a
  second time — and ``build(cls, values)`` makes the validated, typed object.
- **Shapes** (scenarios, webhook payloads): nested mappings and lists described by example —
  ``{"name": str, "description?": str, "gpus": [{"index": int}]}`` — checked by ``check_shape``
  with the path of the offending value (``gpus[3].index``). A leaf may be a ``Key`` (its type,
  allowed values and check apply, with the same messages as a setting's), and a mapping may admit
  other keys (``"...": shape``).
- **Keys** on their own (the fault policy's entries, the simulator's fault parameters): a table of
  ``Key`` checked with ``validate`` (or ``check_value`` for one value).

``REQUIRED`` as a default means the key has none: the data must give it (the health thresholds,
whose numbers live in their commented YAML; a fault parameter such as the XID code).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .documents import DocumentError, load_yaml_file

Check = Callable[[Any], "str | None"]  # returns an error text, or None when the value is valid

#: The default of a key that has none (the value must be given): a setting without a default is a
#: required dataclass field; ``Key.default`` is this object.
REQUIRED: Any = dataclasses.MISSING


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


@dataclasses.dataclass(frozen=True, slots=True)
class Range:
    """A check for a number in ``low..high`` (``high`` None: no upper bound; ``strict``: ``low``
    itself is excluded). Its bounds stay readable (``--help`` texts show them); a NaN or an
    infinity is never in range."""

    low: float
    high: float | None = None
    strict: bool = False

    def __call__(self, value: Any) -> str | None:
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        low, high = self.low, self.high
        if value < low or (self.strict and value == low) or (high is not None and value > high):
            return self.rule()
        return None

    def rule(self) -> str:
        if not self.strict and self.high is not None:
            return f"must be between {self.low} and {self.high}"
        text = f"must be > {self.low}" if self.strict else f"must be >= {self.low}"
        return text + (f" and <= {self.high}" if self.high is not None else "")


def between(low: float, high: float) -> Range:
    """``low <= value <= high``."""
    return Range(low, high)


def at_least(low: float) -> Range:
    """``value >= low`` (and finite)."""
    return Range(low)


def above(low: float, high: float | None = None) -> Range:
    """``value > low`` (and ``<= high`` when given; finite)."""
    return Range(low, high, strict=True)


# -- settings: dataclasses whose fields are the keys ----------------------------------------------

def setting(default: Any, doc: str, check: Check | None = None, allowed: tuple[Any, ...] | None = None) -> Any:
    """A dataclass field that is a key of the schema (its type comes from the annotation);
    ``default`` ``REQUIRED``: a field without a default (the values must name it)."""
    metadata = {"doc": doc, "check": check, "allowed": allowed}
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
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
        if not isinstance(name, str):
            raise ConfigError(f"{prefix}{shown(name)}: keys must be strings")
        key = f"{prefix}{name}"
        if isinstance(value, dict) and key not in schema:
            flat.update(flatten(value, schema, f"{key}."))
        else:
            flat[key] = value
    return flat


def validate(schema: Mapping[str, Key], key: str, value: Any) -> Any:
    """``value`` for ``key`` if the schema allows it; else ConfigError naming the key and the rule."""
    spec = schema.get(key)
    if spec is None:
        if any(name.startswith(f"{key}.") for name in schema):  # a section given as a list, a number, null
            raise ConfigError(f"{key}: must be a mapping (a section of keys {key}.*), got {_got(value)}")
        raise ConfigError(f"{key}: unknown key; allowed keys are {', '.join(sorted(schema))}")
    check_value(key, value, spec)
    return value


#: A number with an exponent as YAML 1.2 and JSON write it, which YAML 1.1 (PyYAML) reads as a
#: string: without a dot (``1e300``) or without a sign in the exponent (``1.5e3``).
_EXPONENT_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")


def yaml_number(spec: Key | None, value: Any) -> Any:
    """``value`` read from YAML, with a string YAML 1.1 left unread (``1e300``) made the float the
    user meant when ``spec`` takes a number (float) and no string; any other value as it is. Only
    for values a caller then keeps from ``validate`` (a JSON string stays a string)."""
    if spec is None or not isinstance(value, str) or not _EXPONENT_NUMBER.fullmatch(value):
        return value
    kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
    return float(value) if float in kinds and str not in kinds else value


def check_value(where: str, value: Any, key: Key, error: type[ValueError] = ConfigError) -> None:
    """Raise ``error`` naming ``where`` and the rule when ``value`` is not valid for ``key``: its
    type, then its allowed values, then its check (a None that the type admits is valid)."""
    kinds = key.kind if isinstance(key.kind, tuple) else (key.kind,)
    check_type(where, value, kinds, error)
    if value is None:
        return
    if key.allowed is not None and value not in key.allowed:
        raise error(f"{where}: must be one of {', '.join(map(str, key.allowed))}, got {shown(value)}")
    if key.check is not None:
        problem = key.check(value)
        if problem:
            raise error(f"{where}: {problem}, got {shown(value)}")


def check_type(where: str, value: Any, kinds: tuple[type, ...], error: type[ValueError] = ConfigError) -> None:
    """Raise ``error`` naming ``where`` when ``value`` is none of ``kinds`` (a bool is no number here)."""
    if isinstance(value, bool) and bool not in kinds:  # bool is an int in Python; not here
        raise error(f"{where}: must be {type_names(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise error(f"{where}: must be {type_names(kinds)}, got {_got(value)}")


def _got(value: Any) -> str:
    """What a wrong value is, for "must be X, got ...": ``list []``, ``null``, ``a boolean``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return f"{type(value).__name__} {shown(value)}"


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (error messages may go back to a client); never
    raises. A long string is cut before ``repr`` copies it; an integer past Python's int/str
    conversion limit, or a value whose ``repr`` fails (nested too deep, holding such an integer), is
    described instead."""
    if isinstance(value, str):
        value = value[:limit]  # its repr is longer than limit when anything was cut: "..." follows
    try:
        text = repr(value)
    except Exception:  # a message must never fail to be made
        if isinstance(value, int):
            text = f"an integer of more than {sys.get_int_max_str_digits()} digits"
        else:
            text = f"a {type(value).__name__} that cannot be shown"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def type_names(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", dict: "a mapping", list: "a list",
             bool: "true or false", type(None): "null"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def read_mapping(path: str | Path, what: str = "--config") -> dict[str, Any]:
    """The YAML file at ``path`` as a mapping (ConfigError when unreadable, not YAML, beyond the
    bounds of ``runtimekit.documents`` or not a mapping)."""
    try:
        data = load_yaml_file(path, what=str(path)) or {}
    except OSError as error:
        raise ConfigError(f"{what}: cannot read {path}: {error.strerror}") from error
    except DocumentError as error:
        raise ConfigError(f"{what}: {error}") from None
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
            values[key] = validate(schema, key, yaml_number(schema.get(key), value))
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = validate(schema, key, value)
    return values


# -- shapes: nested data described by example -----------------------------------------------------

OTHER_KEYS = "..."  # in a mapping shape: the shape of every key not named (``typing.Any``: anything)


def check_shape(value: Any, shape: Any, path: str = "", error: type[ValueError] = ConfigError) -> None:
    """Raise ``error`` naming the path when ``value`` does not match ``shape``.

    A shape is a leaf — a type or tuple of types, a ``Key`` (type, allowed values and check, as
    ``validate`` applies them) or ``typing.Any`` —, ``[item_shape]`` (a list of items), or a mapping
    of key -> shape where a key ending in ``?`` is optional. Unknown keys are refused unless the
    mapping has ``"..."`` (``OTHER_KEYS``): then each other key's value must match its shape
    (``{"...": str}``: a string map; ``{"...": Any}``: other keys are ignored). The path's ``x-``
    keys at the top level are free, for comments."""
    if shape is Any:
        return
    if isinstance(shape, Key):
        check_value(path, value, shape, error)
        return
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise error(f"{path or 'document'}: expected a mapping, got {type(value).__name__}")
        others = shape.get(OTHER_KEYS, _CLOSED)
        allowed = {k.rstrip("?"): k.endswith("?") for k in shape if k != OTHER_KEYS}
        for key in value:
            if not isinstance(key, str):
                raise error(f"{path or 'document'}: keys must be strings, got {shown(key)}")
            if path == "" and key.startswith("x-") or key in allowed:
                continue
            if others is _CLOSED:
                raise error(f"{_join(path, key)}: unknown key (allowed: {', '.join(sorted(allowed))})")
            check_shape(value[key], others, _join(path, key), error)
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


_CLOSED = object()


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# -- a listen address, as both services take it -----------------------------------------------------

#: A port as digits 0-9 (``str.isdigit`` is true of ``²`` and ``٣`` too, which ``int`` refuses or reads).
_PORT = re.compile(r"[0-9]{1,5}")


def listen_address(value: str) -> str | None:
    """The rule ``value`` breaks as a listen address, or None (``check_value`` adds the value)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        return "must be HOST:PORT"
    host = host.strip("[]")
    if not _PORT.fullmatch(port) or not 0 <= int(port) <= 65535:
        return f"port must be a number 0..65535 (it is {port!r})"
    if host not in ("localhost",) and not _is_hostname(host):
        return f"host must be an IP address or a hostname (it is {host!r})"
    return None


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6); raises ValueError with the rule."""
    problem = listen_address(value)
    if problem:
        raise ValueError(f"{problem}, got {value!r}")
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def _is_hostname(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return host.isascii() and all(part and part.replace("-", "").isalnum() for part in host.split("."))


# -- a path, as every path-valued key takes it -------------------------------------------------------

def file_path(value: str) -> str | None:
    """The rule ``value`` breaks as a path (of a file, a folder or a socket), or None: it may not be
    empty (that would be the current directory, or nothing) nor hold a NUL byte (no system call takes one)."""
    if not value or "\0" in value:
        return "must be a path: not empty, without a NUL byte"
    return None


def absolute_path(value: str) -> str | None:
    """``file_path``'s rule, and absolute (a path the kubelet or another process is given must not
    depend on the working directory)."""
    if file_path(value) is not None or not os.path.isabs(value):
        return "must be an absolute path, without a NUL byte"
    return None
