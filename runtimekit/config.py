"""Configuration of the node agent: one section per component, validated before anything starts.

Every key is declared once, as a field of its section's dataclass (``runtimekit.schema.setting``):
its type is the annotation, with its default, its rule and a comment. ``SCHEMA`` (dotted keys) is
derived from them. An unknown key, a wrong type or a value out of range raises ``ConfigError``
naming the key and what is allowed. Flags override the file. Nothing here reads environment variables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from runtimekit.schema import (  # noqa: F401 - re-exported: the configuration's vocabulary
    ConfigError,
    Key,
    between,
    build,
    file_path,
    flatten,
    listen_address,
    parse_listen,
    read_mapping,
    resolve,
    schema_of,
    section,
    setting,
    validate,
    value_at,
)

DEFAULT_PORT = 9445


def _regex(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as error:
        return f"not a valid regular expression ({error})"
    return None


#: A CDI vendor as slices use it: the kind VENDOR/slice (CDI's parser: a letter first, a letter or
#: digit last) and the prefix of the specs' annotation keys VENDOR/slice-id (a lower-case DNS
#: subdomain, as Kubernetes validates annotation keys): both at once.
_CDI_VENDOR = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def cdi_vendor_problem(value: str) -> str | None:
    """The rule ``value`` breaks as the slices' CDI vendor, or None (CDI's SPEC.md and pkg/parser;
    ../shared/reference/dra.md section 4)."""
    if len(value) > 253 or not _CDI_VENDOR.fullmatch(value):
        return ("must be a CDI vendor: a lower-case DNS subdomain starting with a letter, at most 253 characters "
                "(runtimekit.io)")
    return None


def _collectors(value: Mapping[str, Any]) -> str | None:
    for name, enabled in value.items():
        if not isinstance(name, str) or not isinstance(enabled, bool):
            return f"entry {name!r}: must map a collector name to true or false"
    return None


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    """The sampler and the XID watcher."""

    interval_seconds: float = setting(1.0, "seconds between NVML sampling cycles", between(0.1, 60))
    timeout_seconds: float = setting(10.0, "a cycle still running after this long is reported stuck", between(0.5, 300))
    limits_refresh_seconds: float = setting(
        60.0, "seconds between re-reads of rarely changing values (max clocks, thresholds, InfoROM validity)",
        between(1, 3600)
    )
    nvml_retry_seconds: float = setting(
        10.0, "seconds between attempts to initialise NVML while it is unavailable", between(0.1, 600)
    )


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    """The collectors and the exposition."""

    collectors: Mapping[str, bool] = setting(
        {}, "collector name -> enabled; unnamed collectors keep their default", _collectors
    )
    process_cmdline: bool = setting(False, "export each GPU process's command line (runtimekit_process_info)")
    cmdline_redact: str | None = setting(
        None, "regular expression whose matches are masked in command lines (None: built-in)", _regex
    )


@dataclass(frozen=True, slots=True)
class AttributionConfig:
    """Owners of GPU processes and devices: the kubelet, the CRI runtime, /proc."""

    enabled: bool = setting(True, "attribute GPU processes and devices to containers and pods")
    refresh_seconds: float | None = setting(
        None, "seconds between kubelet pod-resources List calls (None: every sampling cycle)", between(0.1, 600)
    )
    cri_refresh_seconds: float = setting(
        30.0, "seconds between full CRI ListContainers and ListPodSandbox calls (also called for unknown containers)",
        between(1, 3600)
    )
    cache_seconds: float = setting(30.0, "how long a down source's last answer is still used", between(0, 3600))
    timeout_seconds: float = setting(2.0, "deadline of each kubelet or CRI call", between(0.1, 60))
    kubelet_socket: str = setting(
        "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet pod-resources API socket", file_path
    )
    cri_socket: str = setting("/run/containerd/containerd.sock", "the CRI runtime socket (containerd, CRI-O)", file_path)
    proc_root: str = setting(
        "/proc", "the host's /proc (mount it into the container; hostPID also works)", file_path
    )
    process_refresh_seconds: float = setting(
        5.0, "seconds between re-reads of a GPU process's CPU seconds and resident memory", between(0, 600)
    )
    max_processes_per_gpu: int = setting(
        256, "process-level series kept per GPU (the biggest memory holders)", between(0, 100_000)
    )


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """The health checker."""

    enabled: bool = setting(True, "run the health checker (GET /api/v1/health, runtimekit_gpu_health)")
    clean_samples_to_clear: int | None = setting(
        None,
        "consecutive samples without its signal before a recoverable fault clears (None: the thresholds' "
        "machine.clean_samples, 3)",
        between(1, 10_000),
    )
    evaluation_timeout_seconds: float = setting(
        2.0, "a health evaluation running longer is a failed check (node suspect)", between(0.05, 60)
    )
    expected_gpus: int | None = setting(
        None, "GPUs the node must have (None: the most ever seen, remembered in state_dir)", between(0, 1024)
    )
    thresholds: str | None = setting(
        None, "the detectors' thresholds YAML file (None: the built-in healthcheck/thresholds)", file_path
    )
    boot_id_path: str = setting(
        "/proc/sys/kernel/random/boot_id", "the node's boot id; a change means a reboot (clears sticky faults)",
        file_path,
    )


@dataclass(frozen=True, slots=True)
class ComponentsConfig:
    """The supervisor of the long-lived components."""

    initial_backoff_seconds: float = setting(
        0.5, "seconds before a component that died is restarted (doubling on each death)", between(0.01, 600)
    )
    max_backoff_seconds: float = setting(
        30.0, "the longest wait before restarting a component that keeps dying", between(0.01, 3600)
    )


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """The policy every HTTP listener applies to its connections (``runtimekit.listener``): the agent's
    and the remediation service's. The deadlines bound only the *reading of a request*; a handler's
    work and its response have none, so a slow scrape is never cut.

    Defaults: a Prometheus scraper, Alertmanager or a kubelet probe sends its request headers in one
    write, so 10 s is ample even on a congested link while a slowloris client (a header byte every few
    seconds) holds a slot for 10 s only (nginx's ``client_header_timeout`` is 60 s; Go servers often
    use 5-10 s). Request bodies here are small JSON documents (the simulator's control API, alert
    webhooks): 30 s for the whole body. 75 s keep-alive outlasts Prometheus's default 1 min scrape
    interval, so a scraper's connection is reused (nginx's ``keepalive_timeout`` default is 75 s too).
    256 connections serve a few Prometheus replicas and probes many times over and stay well under
    the 1,024 descriptors (``RLIMIT_NOFILE``) a container commonly gets."""

    header_timeout_seconds: float = setting(
        10.0, "seconds from a connection's start, or a kept-alive connection's next byte, to a request's last "
        "header line; slower connections are closed", between(0.1, 600),
    )
    body_timeout_seconds: float = setting(
        30.0, "seconds from a request's headers to the last byte of its body; slower connections are closed",
        between(0.1, 3600),
    )
    keepalive_timeout_seconds: float = setting(
        75.0, "seconds an idle kept-alive connection stays open waiting for its next request", between(0.1, 3600)
    )
    max_connections: int = setting(
        256, "open connections at most; a new one then replaces the longest idle or slow one, or is refused "
        "when all are busy (capped below RLIMIT_NOFILE)", between(1, 1_000_000),
    )
    client_error_log_level: str = setting(
        "info", "level of client errors (malformed requests, timeouts): each kind logged once, then counted "
        "in a summary a minute", allowed=("debug", "info", "warning", "error"),
    )
    web_config_file: str | None = setting(
        None, "the web configuration file of the Prometheus exporter-toolkit: TLS (tls_server_config), client "
        "certificates, basic auth users (bcrypt hashes), response headers; re-read when it or a file it names "
        "changes (None: plain HTTP, no auth; docs/security.md)", file_path,
    )


@dataclass(frozen=True, slots=True)
class SlicerConfig:
    """The slicer: TDM shares and on-demand MIG instances (``runtimekit.slicer``)."""

    enabled: bool = setting(True, "run the slicer (slices through the gRPC API; runtimekit slice ...)")
    policy: str = setting(
        "binpack", "which card a slice for any device goes to: the fullest that fits (binpack) or the emptiest (spread)",
        allowed=("binpack", "spread"),
    )
    memory_reserve_mib: int = setting(
        1024, "MiB of each card's memory no TDM slice may take (the driver's and CUDA contexts' share)", between(0, 1 << 20)
    )
    cdi_dir: str = setting("/var/run/cdi", "directory the CDI specification of each TDM slice is written to", file_path)
    cdi_vendor: str = setting(
        "runtimekit.io", "the CDI vendor name (a slice is injected as VENDOR/slice=ID)", cdi_vendor_problem
    )
    owner_grace_seconds: float = setting(
        60.0, "seconds a pod owner seen on the node may be missing or finished (no ready sandbox listed by the CRI "
        "runtime) before its slices are reclaimed",
        between(0, 86_400),
    )
    owner_start_seconds: float = setting(
        600.0, "seconds a pod owner never seen running may take to start (image pulls) before its slices are reclaimed",
        between(0, 86_400),
    )
    orphan_grace_seconds: float = setting(
        120.0, "seconds a MIG instance with no slice and no process lives before it is destroyed", between(0, 86_400)
    )
    reconcile_seconds: float = setting(
        5.0, "seconds between reconciliations of the journal, NVML and the owners", between(0.1, 3600)
    )
    isolation_window_seconds: float = setting(
        60.0, "a slice's utilization share above its compute share for this long is a finding", between(1, 86_400)
    )


@dataclass(frozen=True, slots=True)
class TopologyConfig:
    """Topology discovery (``runtimekit.topology``): GPU links from NVML, the PCI hierarchy from sysfs."""

    enabled: bool = setting(True, "discover the node's topology (GET /api/v1/topology, runtimekit topo)")
    sys_root: str = setting("/sys", "the host's sysfs (mount it read-only into the container)", file_path)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """The gRPC API runtimekit.v1 (``runtimekit.api``): the one way in for the container layer."""

    enabled: bool = setting(True, "serve the gRPC API")
    socket: str | None = setting(None, "the unix socket, mode 0600 (None: STATE_DIR/runtimekit.sock)", file_path)
    tcp_listen: str | None = setting(
        None, "HOST:PORT for gRPC over TCP, TLS and a client credential only, from the web configuration file "
        "(None: unix socket only)",
        listen_address,
    )
    web_config_file: str | None = setting(
        None, "the TCP port's web configuration file (TLS, client certificates, basic auth users; None: "
        "listener.web_config_file); it must have a tls_server_config, and basic_auth_users or client_auth_type "
        "RequireAndVerifyClientCert", file_path,
    )


@dataclass(frozen=True, slots=True)
class Config:
    """Validated configuration: top-level keys and one section per component."""

    listen: str = setting(
        f"0.0.0.0:{DEFAULT_PORT}", "HOST:PORT for /metrics, /healthz, /readyz and the API", listen_address
    )
    state_dir: str = setting("/var/lib/runtimekit", "directory for state that must survive restarts", file_path)
    log_level: str = setting("info", "logging threshold", allowed=("debug", "info", "warning", "error"))
    sampling: SamplingConfig = section(SamplingConfig)
    exporter: ExporterConfig = section(ExporterConfig)
    attribution: AttributionConfig = section(AttributionConfig)
    health: HealthConfig = section(HealthConfig)
    components: ComponentsConfig = section(ComponentsConfig)
    listener: ListenerConfig = section(ListenerConfig)
    slicer: SlicerConfig = section(SlicerConfig)
    topology: TopologyConfig = section(TopologyConfig)
    api: ApiConfig = section(ApiConfig)
    # Keys of the sections that the command line registered with their component (the simulator's
    # ``sim.*``): dotted key -> validated value. Empty for a production agent.
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def listen_host(self) -> str:
        return parse_listen(self.listen)[0]

    @property
    def listen_port(self) -> int:
        return parse_listen(self.listen)[1]

    @property
    def api_web_config_file(self) -> str | None:
        """The gRPC TCP port's web configuration file: ``api.web_config_file``, else the HTTP listener's."""
        return self.api.web_config_file or self.listener.web_config_file

    @property
    def api_socket(self) -> str:
        """The gRPC API's unix socket: ``api.socket``, or ``runtimekit.sock`` in the state directory."""
        return self.api.socket or str(Path(self.state_dir) / "runtimekit.sock")


SCHEMA: dict[str, Key] = schema_of(Config)


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
    extra = MappingProxyType({key: values[key] for key in extra_schema})
    config: Config = build(Config, values, extra=extra)
    components = config.components
    if components.max_backoff_seconds < components.initial_backoff_seconds:
        raise ConfigError(
            f"components.max_backoff_seconds: must be at least components.initial_backoff_seconds "
            f"({components.initial_backoff_seconds}), got {components.max_backoff_seconds}"
        )
    check_web_config_file(config.listener.web_config_file, "listener.web_config_file")
    if config.api.web_config_file is not None:
        check_web_config_file(config.api.web_config_file, "api.web_config_file")
    if config.api.tcp_listen is not None:
        check_grpc_port(config.api_web_config_file,
                        "api.web_config_file" if config.api.web_config_file else "listener.web_config_file")
    return config


def check_web_config_file(path: str | None, key: str) -> None:
    """ConfigError naming ``key``, the file and the rule when the web configuration file at ``path``
    (None: none) cannot be used now: read, parsed and its certificates loaded, before anything starts."""
    if path is not None:
        from runtimekit.webconfig import load_web_config

        load_web_config(path, key)


def check_grpc_port(path: str | None, key: str) -> None:
    """ConfigError unless the gRPC TCP port can serve the web configuration file at ``path``: TLS
    that grpcio can honour, and a credential asked of every client (the port changes the GPUs;
    ``runtimekit.webconfig.grpc_port.check_grpc_port_config``)."""
    if path is None:
        raise ConfigError("api.tcp_listen: needs a web configuration file with a tls_server_config and "
                          "basic_auth_users or client_auth_type: RequireAndVerifyClientCert "
                          "(listener.web_config_file or api.web_config_file): the TCP port is TLS only and "
                          "changes the GPUs")
    from runtimekit.webconfig import load_web_config
    from runtimekit.webconfig.grpc_port import check_grpc_port_config

    check_grpc_port_config(load_web_config(path, key)[0], key)
