"""docs/reference/configuration.md: every key of every configuration file, read from the schema
objects the commands validate with, so the page cannot list a key the code does not know or miss
one it does.

Each command's file is one settings dataclass (``runtimekit.schema.setting`` fields, sections as
nested dataclasses) whose flat schema (``SCHEMA``: dotted key -> ``Key``) gives each key's type,
default, allowed values, check and doc; a section's text is its dataclass's docstring. A check is a
function: a ``Range`` says its own rule; for the others the rule is written in ``RULES`` below,
by the check's qualified name (a check missing there is shown by its name).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from runtimekit import config as agent_config
from runtimekit.healthcheck import thresholds
from runtimekit.kube.deviceplugin import config as device_plugin_config
from runtimekit.kube.dra import config as dra_config
from runtimekit.kube.gang import config as gang_config
from runtimekit.kube.remediation import config as remediation_config
from runtimekit.schema import REQUIRED, Key, Range
from runtimekit.sim.component import SIM_SCHEMA

from .markdown import anchor, code, generated_header, table

# The rule of each check that is a function, by its module and qualified name.
RULES: dict[str, str] = {
    "runtimekit.schema.listen_address": "HOST:PORT: an IP address or a hostname ([::1]:PORT for IPv6), a port 0..65535",
    "runtimekit.config._collectors": "collector name -> true or false (the names: the metrics reference)",
    "runtimekit.config._regex": "a regular expression Python's re compiles",
    "runtimekit.config.cdi_vendor_problem": "a CDI vendor: a lower-case DNS subdomain starting with a letter, at most "
    "253 characters (the kind VENDOR/slice and the annotation keys VENDOR/slice-id name it)",
    "runtimekit.schema.file_path": "a path: not empty, without a NUL byte",
    "runtimekit.kube.deviceplugin.config._absolute": "an absolute path",
    "runtimekit.kube.deviceplugin.config._mig_prefix": "with a profile appended (PREFIX1g.10gb), an extended resource name",
    "runtimekit.kube.deviceplugin.config._cdi_kind": "a CDI kind: vendor/class",
    "runtimekit.kube.deviceplugin.names.resource_name_problem": "an extended resource name: DOMAIN/NAME, outside kubernetes.io",
    "runtimekit.kube.k8s_names.node_name_problem": "a Node's name: a lower-case DNS subdomain of at most 253 characters",
    "runtimekit.kube.dra.config._absolute": "an absolute path",
    "runtimekit.kube.dra.config._driver_name": "a lower-case DNS subdomain of at most 63 characters",
    "runtimekit.kube.dra.config._cdi_kind": "a CDI kind VENDOR/CLASS: a DNS subdomain, then 1-63 of A-Z a-z 0-9 - _ .",
    "runtimekit.kube.remediation.config._url": "an http:// or https:// URL with a host (a port 1-65535 if it names one; no spaces)",
    "runtimekit.kube.remediation.ladders.ladder_problem": "agent action -> ordered steps from cordon, taint, drain, replace",
    "runtimekit.kube.remediation.template.template_problem": "a JSON body whose {placeholders} are the fields named",
    "runtimekit.kube.gang.config._tier_keys": "a non-empty list of node label keys, widest tier first, each once",
    "runtimekit.kube.gang.config._device_class": "a DeviceClass name: a DNS subdomain",
}


@dataclass(frozen=True)
class ConfigFile:
    """One configuration file: who reads it, its schema and the dataclass that declares it."""

    title: str
    reader: str
    schema: Mapping[str, Key]
    declared_by: type | None
    about: str
    defaults: Callable[[], Mapping[str, Any]] | None = None  # for REQUIRED keys whose values live in a file


def _threshold_defaults() -> dict[str, Any]:
    return {f"{section}.{key}": value for section, values in thresholds.load_thresholds(None).items()
            for key, value in values.items()}


FILES = (
    ConfigFile("The node agent", "`runtimekit serve --config FILE`", agent_config.SCHEMA, agent_config.Config,
               "Flags override the file: `--listen`, `--state-dir`, `--interval` (sampling.interval_seconds), "
               "`--log-level`. An example with every key: deploy/runtimekit.example.yaml."),
    ConfigFile("The simulated node", "`runtimekit serve --sim SCENARIO`", SIM_SCHEMA, None,
               "Known only when the agent runs on the simulated node (docs/simulator.md); flags `--sim`, `--seed`, "
               "`--sim-load`, `--sim-processes`, `--sim-pods` override them."),
    ConfigFile("Health thresholds", "the agent's `health.thresholds` file", thresholds.FLAT_SCHEMA, thresholds.Thresholds,
               "Every key may be left out: the default is the packaged healthcheck/thresholds.yaml's value, whose "
               "comments say where each number comes from (docs/health.md).", _threshold_defaults),
    ConfigFile("The device plugin", "`runtimekit device-plugin serve --config FILE`", device_plugin_config.SCHEMA,
               device_plugin_config.DevicePluginConfig,
               "Flags override the file: `--agent-socket`, `--kubelet-socket`, `--node-name` (else `$NODE_NAME`), `--log-level` "
               "(docs/deviceplugin.md)."),
    ConfigFile("The DRA driver", "`runtimekit dra serve --config FILE`", dra_config.SCHEMA, dra_config.DraConfig,
               "node_name comes from `--node-name`, else $NODE_NAME, else the file; `--agent-socket` and "
               "`--log-level` override the file too (docs/dra.md)."),
    ConfigFile("The remediation service", "`runtimekit remediate serve --config FILE`", remediation_config.SCHEMA,
               remediation_config.RemediationConfig,
               "One of auth.token_file, auth.basic_file or a web configuration file that asks every client for a "
               "credential is required (docs/remediation.md). An example: deploy/remediation.example.yaml."),
    ConfigFile("Gang placement", "`runtimekit gang serve --config FILE`", gang_config.SCHEMA, gang_config.GangConfig,
               "`--kubeconfig` and `--log-level` override the file (docs/gang.md)."),
)


def render() -> str:
    lines = generated_header("Configuration reference", "the configuration schemas (runtimekit/config.py, kube/*/config.py, "
                             "healthcheck/thresholds.py, runtimekit/sim/component.py)")
    lines += [
        "Every command reads one YAML file of nested mappings; a key below is its path (`sampling.interval_seconds` "
        "is `interval_seconds` under `sampling:`). A key that is not listed, a value of the wrong type or one that "
        "breaks its rule stops the command before it starts (exit code 2) with one line naming the key and the rule.",
        "",
    ]
    lines += [f"- [{f.title}](#{anchor(f.title)}): {f.reader}" for f in FILES]
    for config_file in FILES:
        lines += ["", f"## {config_file.title}", "", f"Read by {config_file.reader}. {config_file.about}"]
        defaults = config_file.defaults() if config_file.defaults else {}
        docs = dict(_section_docs(config_file.declared_by)) if config_file.declared_by else {}
        for section, keys in _by_section(config_file.schema).items():
            if section:
                lines += ["", f"### `{section}`"]
                if docs.get(section):
                    lines += ["", docs[section]]
            lines.append("")
            lines += table(("Key", "Type", "Default", "Rule", "Meaning"),
                           ((code(name), _type(key), _default(key, defaults.get(name)), _rule(key), key.doc)
                            for name, key in keys.items()))
    return "\n".join(lines) + "\n"


def _by_section(schema: Mapping[str, Key]) -> dict[str, dict[str, Key]]:
    """Keys grouped by their section (the path before the last dot; "" for top-level keys), top level first."""
    groups: dict[str, dict[str, Key]] = {}
    for name, key in schema.items():
        groups.setdefault(name.rpartition(".")[0], {})[name] = key
    return dict(sorted(groups.items(), key=lambda item: (item[0] != "", list(groups).index(item[0]))))


def _section_docs(cls: type, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted section, the first paragraph of its dataclass's docstring) for every section of ``cls``."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        section = hints[field.name]
        if dataclasses.is_dataclass(section) and isinstance(section, type):
            yield f"{prefix}{field.name}", _docstring(section)
            yield from _section_docs(section, f"{prefix}{field.name}.")


def _docstring(cls: type) -> str:
    """The first paragraph of ``cls``'s own docstring ("" for the one dataclass() writes)."""
    doc = cls.__doc__ or ""
    if doc.startswith(f"{cls.__name__}("):
        return ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def _type(key: Key) -> str:
    names = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "mapping", list: "list",
             tuple: "list", type(None): "null"}
    kinds = key.kind if isinstance(key.kind, tuple) else (key.kind,)
    if float in kinds:
        kinds = tuple(kind for kind in kinds if kind is not int)  # an int is a valid float, as YAML has it
    shown = list(dict.fromkeys(names.get(kind, kind.__name__) for kind in kinds))
    return " or ".join(shown)


def _default(key: Key, file_default: Any) -> str:
    value = file_default if key.default is REQUIRED and file_default is not None else key.default
    if value is REQUIRED:
        return "required"
    return code(_yaml(value))


def _yaml(value: Any) -> str:
    """``value`` as one line of YAML flow style (``null``, ``[a, b]``, ``{}``)."""
    if isinstance(value, Mapping):
        value = {k: _plain(v) for k, v in value.items()}
    text = yaml.safe_dump(_plain(value), default_flow_style=True, width=1 << 16, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _rule(key: Key) -> str:
    parts = []
    if key.allowed is not None:
        parts.append("one of " + ", ".join(_yaml(value) for value in key.allowed))
    check = key.check
    if isinstance(check, Range):
        parts.append(check.rule().removeprefix("must be "))
    elif check is not None:
        parts.append(_check_rule(check))
    return "; ".join(parts)


def _check_rule(check: Callable[[Any], Any]) -> str:
    name = f"{check.__module__}.{check.__qualname__}"
    if name in RULES:
        return RULES[name]
    if check.__qualname__.endswith("_strings.<locals>.check"):  # gang's list checks: their rule is their argument
        item = inspect.getclosurevars(check).nonlocals.get("rule", "a string")
        return f"a list of strings, each {item}, each once"
    return f"checked by {name}"
