"""Configuration of ``runtimekit remediate serve``: one YAML file, every key declared once.

Same rules (``runtimekit.schema``) as the agent's configuration: an unknown key, a wrong type or a
value out of range raises ``ConfigError`` naming the key and the rule. Secrets are read from files named here, never from
the environment. What a step would only find out after the node was cordoned is checked here, at
start: ``replacement.url`` (a host, a valid port), ``taint_key`` (a Kubernetes qualified name) and
the label keys (not empty).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runtimekit.config import ListenerConfig, check_web_config_file
from runtimekit.kube.kubeclient import KubernetesConfig
from runtimekit.schema import ConfigError, Key, between, build, file_path, listen_address, resolve, schema_of, section, setting, shown

from .ladders import DEFAULT_LADDERS, ladder_problem, merged
from .names import qualified_name_problem
from .template import FIELDS, template_problem

DEFAULT_TEMPLATE = {
    "node": "{node}",
    "gpu_uuids": "{gpu_uuids}",
    "gpu_indices": "{gpu_indices}",
    "fault": "{fault}",
    "alert_fingerprint": "{fingerprint}",
}


# The alert labels the service reads: an empty name would make every alert ask for nothing.
LABEL_KEYS = ("node_label", "action_label", "gpu_uuid_label", "gpu_index_label", "fault_label")


def _url(value: str) -> str | None:
    """Why ``value`` cannot be the spare-node webhook, or None: an http:// or https:// URL with a
    host, a port 1-65535 if it names one, no white space or control character, and no credentials
    (``user:password@``): they would be copied wherever the URL is (the journal's dry-run records,
    logs); a secret belongs in ``replacement.token_file``."""
    if any(char.isspace() or unicodedata.category(char) == "Cc" for char in value):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(value)
    except ValueError as error:  # an unclosed [IPv6 address, say
        return f"not a URL ({error})"
    if parts.scheme.lower() not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "must name a host (http://HOST[:PORT]/PATH)"
    if "@" in parts.netloc:
        return "must not hold credentials (USER:PASSWORD@ in the URL): put a token in replacement.token_file"
    try:
        port = parts.port
    except ValueError:  # not a number, or over 65535
        port = 0
    return "the port must be 1-65535" if port == 0 else None


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """How Alertmanager authenticates: one of these, or basic_auth_users (or client certificates
    required) in the web configuration file, listener.web_config_file (auth.py)."""

    token_file: str | None = setting(None, "file holding the bearer token Alertmanager sends", file_path)
    basic_file: str | None = setting(None, "file holding USER:PASSWORD for basic auth", file_path)


@dataclass(frozen=True, slots=True)
class DrainConfig:
    """The drain step evicts through the Eviction API (policy/v1), so PodDisruptionBudgets are
    respected: an eviction a PDB refuses (HTTP 429) is retried every retry_seconds until
    timeout_seconds, then the step fails naming the pods still blocked. Nothing is force-deleted."""

    retry_seconds: float = setting(
        5.0, "seconds between retries of evictions a PodDisruptionBudget blocks", between(0.01, 600)
    )
    timeout_seconds: float = setting(
        300.0, "the drain step fails if pods are still blocked after this long", between(0, 86400)
    )


@dataclass(frozen=True, slots=True)
class ReplacementConfig:
    """The spare-node request, delivered at least once: the receiver must honour Idempotency-Key.

    Every call for one replacement carries the same ``Idempotency-Key`` header (the action's key,
    journal.idempotency_key). Within one run a call is retried at most ``max_attempts`` times; a
    crash or SIGKILL after the receiver acted but before the journal commit makes the restarted
    service call again with the same key, at most ``max_step_runs`` runs in all. So the receiver
    may see one replacement more than once (at most max_attempts × max_step_runs calls) and must
    treat a key it has seen as the same request (answer as before, act once); exactly-once
    delivery across a crash is not possible without its help.
    """

    url: str | None = setting(None, "node replacement webhook (POST JSON, at-least-once with an Idempotency-Key)",
                              _url)
    body_template: Mapping[str, Any] = setting(
        DEFAULT_TEMPLATE, "JSON body; " + " ".join(f"{{{name}}}" for name in FIELDS) + " are filled in "
        "(any other {name} is refused at start)", template_problem,
    )
    token_file: str | None = setting(None, "file with a bearer token for the replacement webhook", file_path)
    timeout_seconds: float = setting(10.0, "deadline of one replacement call", between(0.1, 300))
    max_attempts: int = setting(5, "calls before the step is failed (5xx, timeouts)", between(1, 100))
    backoff_seconds: float = setting(1.0, "first retry delay, doubled each time", between(0, 600))


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """The circuit breaker: too many nodes actioned within the window stops all actions."""

    max_nodes: int = setting(3, "more distinct nodes actioned within the window opens the breaker", between(1, 100_000))
    max_percent: float = setting(
        10.0, "more than this % of nodes actioned opens the breaker (once breaker.min_nodes is reached)",
        between(0, 100),
    )
    # Without a floor, one node of a cluster under ten nodes is already more than 10 %.
    min_nodes: int = setting(
        2, "the percentage rule applies from this many nodes within the window "
        "(the first min_nodes - 1 nodes are never refused by it)", between(1, 100_000),
    )
    window_seconds: float = setting(3600.0, "the breaker's window", between(1, 30 * 86400))


@dataclass(frozen=True, slots=True)
class RemediationConfig:
    """Validated configuration: top-level keys and one section per concern."""

    listen: str = setting("0.0.0.0:9446", "HOST:PORT of the webhook receiver", listen_address)
    db_path: str = setting("/var/lib/runtimekit/remediation.db", "the SQLite journal (WAL)", file_path)
    log_level: str = setting("info", "logging threshold", allowed=("debug", "info", "warning", "error"))
    max_body_bytes: int = setting(1 << 20, "larger webhook bodies are refused with 413", between(1024, 64 << 20))
    dry_run: bool = setting(False, "journal what would be done, change nothing")
    action_delay_seconds: float = setting(
        0.0, "wait this long after an alert arrives before acting", between(0, 86400)
    )
    worker_interval_seconds: float = setting(1.0, "seconds between journal polls of the worker", between(0.01, 60))
    # A step interrupted by a crash runs again after the restart; this bounds how often, so a
    # crash loop cannot repeat a replacement call without end (ReplacementConfig's docstring).
    max_step_runs: int = setting(
        3, "a step started this many times without finishing (the service died while it ran) fails "
        "instead of running again", between(1, 100),
    )
    node_label: str = setting("node", "alert label naming the Kubernetes node")
    # The shipped alerts (alerts/runtimekit.rules.yml) carry the agent's labels: `uuid` (GPU-…) and
    # `gpu` (the NVML index); node-level alerts (NVML down, GPUs missing) carry neither.
    gpu_uuid_label: str = setting("uuid", "alert label with the GPU UUID(s), comma-separated")
    gpu_index_label: str = setting("gpu", "alert label with the GPU index(es), comma-separated")
    # The shipped alerts carry the agent's fault name (row_remap_failure, gpu_lost) as `fault`, but
    # RuntimeKitNodeNVMLDown aggregates it away: a request for it names the alert (actions.py).
    fault_label: str = setting("fault", "alert label naming the fault; an alert without it is named by its alertname")
    action_label: str = setting("action", "alert label with the agent's action; it chooses the ladder")
    # Keyed by the agent's action names (ladders.py has the defaults, one comment each); merged
    # over the defaults, so naming one action leaves the others as they are.
    ladders: Mapping[str, list[str]] = setting(
        DEFAULT_LADDERS,
        "action name -> ordered steps (cordon, taint, drain, replace; [] for none); drain is opt-in, "
        "e.g. replace_node: [cordon, taint, drain, replace]",
        ladder_problem,
    )
    taint_key: str = setting("runtimekit.io/gpu-unhealthy", "the NoSchedule taint key added by the taint step")
    cooldown_seconds: float = setting(
        3600.0, "a node actioned for one alert is left alone this long for others", between(0, 30 * 86400)
    )
    auth: AuthConfig = section(AuthConfig)
    drain: DrainConfig = section(DrainConfig)
    kubernetes: KubernetesConfig = section(KubernetesConfig)
    listener: ListenerConfig = section(ListenerConfig)
    replacement: ReplacementConfig = section(ReplacementConfig)
    breaker: BreakerConfig = section(BreakerConfig)


SCHEMA: dict[str, Key] = schema_of(RemediationConfig)


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> RemediationConfig:
    """Read the YAML file (if any), apply overrides (dotted keys), validate."""
    values = resolve(SCHEMA, path, overrides)
    web_config = values["listener.web_config_file"]
    check_web_config_file(web_config, "listener.web_config_file")
    if values["auth.token_file"] is None and values["auth.basic_file"] is None and not _web_config_authenticates(
            web_config):
        raise ConfigError("auth.token_file: set it, auth.basic_file, or basic_auth_users or client certificates "
                          "(RequireAndVerifyClientCert) in listener.web_config_file; the receiver never runs without auth")
    if values["breaker.min_nodes"] > values["breaker.max_nodes"]:
        raise ConfigError(f"breaker.min_nodes: must be at most breaker.max_nodes ({values['breaker.max_nodes']}), "
                          f"got {values['breaker.min_nodes']}")
    _check_names(values)
    values["ladders"] = merged(values["ladders"])
    config: RemediationConfig = build(RemediationConfig, values)
    return config


def _check_names(values: Mapping[str, Any]) -> None:
    """ConfigError naming the key unless the label keys name a label and ``taint_key`` is a key the
    API server accepts, found at start instead of when an alert arrives or a node is tainted."""
    for key in LABEL_KEYS:
        if not values[key].strip():
            raise ConfigError(f"{key}: must name an alert label, got {shown(values[key])}")
    problem = qualified_name_problem(values["taint_key"])
    if problem:
        raise ConfigError(f"taint_key: {problem} (a Kubernetes qualified name), got {shown(values['taint_key'])}")


def _web_config_authenticates(path: str | None) -> bool:
    """Does the (valid) web configuration file at ``path`` ask every client for a credential?"""
    if path is None:
        return False
    from runtimekit.webconfig import read_web_config

    return read_web_config(path, "listener.web_config_file").authenticates
