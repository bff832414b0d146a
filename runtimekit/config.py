"""Configuration: a versioned YAML schema plus command-line flags, validated before anything starts.

Every key is declared once in ``SCHEMA`` with its type, default, allowed values and a comment;
an unknown key, a wrong type or a value out of range raises ``ConfigError`` naming the key and
what is allowed. Flags override the file. Nothing here reads environment variables.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

DEFAULT_PORT = 9445


class ConfigError(ValueError):
    """Invalid configuration; the message names the key and the rule."""


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key: its type, default, validation and documentation."""

    kind: type | tuple[type, ...]
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns an error text, or None when valid
    allowed: tuple[Any, ...] | None = None


def between(low: float, high: float) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def listen_address(value: str) -> str | None:
    try:
        parse_listen(value)
    except ValueError as error:
        return str(error)
    return None


def _regex(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as error:
        return f"not a valid regular expression ({error})"
    return None


def _collectors(value: Mapping[str, Any]) -> str | None:
    for name, enabled in value.items():
        if not isinstance(name, str) or not isinstance(enabled, bool):
            return f"entry {name!r}: must map a collector name to true or false"
    return None


SCHEMA: dict[str, Key] = {
    "listen": Key(str, f"0.0.0.0:{DEFAULT_PORT}", "HOST:PORT for /metrics, /healthz, /readyz and the API", listen_address),
    "state_dir": Key(str, "/var/lib/runtimekit", "directory for state that must survive restarts"),
    "log_level": Key(str, "info", "logging threshold", allowed=("debug", "info", "warning", "error")),
    "sampling.interval_seconds": Key((int, float), 1.0, "seconds between NVML sampling cycles", between(0.1, 60)),
    "sampling.timeout_seconds": Key(
        (int, float), 10.0, "a cycle still running after this long is reported stuck", between(0.5, 300)
    ),
    "sampling.limits_refresh_seconds": Key(
        (int, float), 60.0, "seconds between re-reads of rarely changing values (max clocks, thresholds)",
        between(1, 3600),
    ),
    "sampling.nvml_retry_seconds": Key(
        (int, float), 10.0, "seconds between attempts to initialise NVML while it is unavailable", between(0.1, 600)
    ),
    "exporter.collectors": Key(dict, {}, "collector name -> enabled; unnamed collectors keep their default", _collectors),
    "exporter.process_cmdline": Key(bool, False, "export each GPU process's command line (runtimekit_process_info)"),
    "exporter.cmdline_redact": Key(
        (str, type(None)), None, "regular expression whose matches are masked in command lines (None: built-in)", _regex
    ),
    "attribution.enabled": Key(bool, True, "attribute GPU processes and devices to containers and pods"),
    "attribution.refresh_seconds": Key(
        (int, float, type(None)), None, "seconds between kubelet pod-resources List calls (None: every sampling cycle)",
        between(0.1, 600),
    ),
    "attribution.cri_refresh_seconds": Key(
        (int, float), 30.0, "seconds between full CRI ListContainers calls (also called for unknown containers)",
        between(1, 3600),
    ),
    "attribution.cache_seconds": Key(
        (int, float), 30.0, "how long a down source's last answer is still used", between(0, 3600)
    ),
    "attribution.timeout_seconds": Key((int, float), 2.0, "deadline of each kubelet or CRI call", between(0.1, 60)),
    "attribution.kubelet_socket": Key(
        str, "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet pod-resources API socket"
    ),
    "attribution.cri_socket": Key(str, "/run/containerd/containerd.sock", "the CRI runtime socket (containerd, CRI-O)"),
    "attribution.proc_root": Key(str, "/proc", "the host's /proc (mount it into the container; hostPID also works)"),
    "attribution.process_refresh_seconds": Key(
        (int, float), 5.0, "seconds between re-reads of a GPU process's CPU seconds and resident memory",
        between(0, 600),
    ),
    "attribution.max_processes_per_gpu": Key(
        int, 256, "process-level series kept per GPU (the biggest memory holders)", between(0, 100_000)
    ),
    "health.enabled": Key(bool, True, "run the health checker (GET /api/v1/health, runtimekit_gpu_health)"),
    "health.clean_samples_to_clear": Key(
        (int, type(None)), None,
        "consecutive samples without its signal before a recoverable fault clears (None: the thresholds' "
        "machine.clean_samples, 3)", between(1, 10_000),
    ),
    "health.evaluation_timeout_seconds": Key(
        (int, float), 2.0, "a health evaluation running longer is a failed check (node suspect)", between(0.05, 60)
    ),
    "health.expected_gpus": Key(
        (int, type(None)), None, "GPUs the node must have (None: the most ever seen, remembered in state_dir)",
        between(0, 1024),
    ),
    "health.thresholds": Key(
        (str, type(None)), None, "the detectors' thresholds YAML file (None: the built-in healthcheck/thresholds)"
    ),
    "health.boot_id_path": Key(
        str, "/proc/sys/kernel/random/boot_id", "the node's boot id; a change means a reboot (clears sticky faults)"
    ),
    "components.initial_backoff_seconds": Key(
        (int, float), 0.5, "seconds before a component that died is restarted (doubling on each death)",
        between(0.01, 600),
    ),
    "components.max_backoff_seconds": Key(
        (int, float), 30.0, "the longest wait before restarting a component that keeps dying", between(0.01, 3600)
    ),
}


@dataclass(frozen=True, slots=True)
class Config:
    """Validated configuration. Attribute names follow the dotted keys with '.' → '_'; defaults live in ``SCHEMA``."""

    listen: str
    state_dir: str
    log_level: str
    sampling_interval_seconds: float
    sampling_timeout_seconds: float
    sampling_limits_refresh_seconds: float
    sampling_nvml_retry_seconds: float
    exporter_collectors: Mapping[str, bool]
    exporter_process_cmdline: bool
    exporter_cmdline_redact: str | None
    attribution_enabled: bool
    attribution_refresh_seconds: float | None
    attribution_cri_refresh_seconds: float
    attribution_cache_seconds: float
    attribution_timeout_seconds: float
    attribution_kubelet_socket: str
    attribution_cri_socket: str
    attribution_proc_root: str
    attribution_process_refresh_seconds: float
    attribution_max_processes_per_gpu: int
    health_enabled: bool
    health_clean_samples_to_clear: int | None
    health_evaluation_timeout_seconds: float
    health_expected_gpus: int | None
    health_thresholds: str | None
    health_boot_id_path: str
    components_initial_backoff_seconds: float
    components_max_backoff_seconds: float
    # Keys of the sections that the command line registered with their component (the simulator's
    # ``sim.*``): dotted key -> validated value. Empty for a production agent.
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def listen_host(self) -> str:
        return parse_listen(self.listen)[0]

    @property
    def listen_port(self) -> int:
        return parse_listen(self.listen)[1]


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6); raises ValueError with the rule."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"must be HOST:PORT, got {value!r}")
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"port must be a number 0..65535, got {port!r}")
    if host not in ("localhost",) and not _is_hostname(host):
        raise ValueError(f"host must be an IP address or a hostname, got {host!r}")
    return host, int(port)


def _is_hostname(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return all(part and part.replace("-", "").isalnum() for part in host.split("."))


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
    if isinstance(value, bool) and bool not in kinds:  # bool is an int in Python; not here
        raise ConfigError(f"{key}: must be {_type_names(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise ConfigError(f"{key}: must be {_type_names(kinds)}, got {type(value).__name__} {value!r}")
    if spec.allowed is not None and value not in spec.allowed:
        raise ConfigError(f"{key}: must be one of {', '.join(map(str, spec.allowed))}, got {value!r}")
    if spec.check is not None and value is not None:
        problem = spec.check(value)
        if problem:
            raise ConfigError(f"{key}: {problem}, got {value!r}")
    return value


def _type_names(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", dict: "a mapping", type(None): "null"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def read_mapping(path: str | Path) -> dict[str, Any]:
    """The YAML file at ``path`` as a mapping (ConfigError when unreadable, not YAML or not a mapping)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"--config: cannot read {path}: {error.strerror}") from error
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"--config: {path} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {path} must hold a mapping at the top level")
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


def load(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    extra_schema: Mapping[str, Key] | None = None,
) -> Config:
    """Read the YAML file (if any), apply flag overrides (dotted keys), validate, return Config.

    ``extra_schema``: the keys of components the command line registers (the simulator's ``sim.*``);
    without it such keys are unknown, as in production."""
    extra_schema = extra_schema or {}
    clash = set(extra_schema) & set(SCHEMA)
    if clash:
        raise ValueError(f"extra_schema: keys already in the agent's schema: {', '.join(sorted(clash))}")
    values = resolve({**SCHEMA, **extra_schema}, path, overrides)
    core = {key.replace(".", "_"): values[key] for key in SCHEMA}
    extra = MappingProxyType({key: values[key] for key in extra_schema})
    return Config(**core, extra=extra)
