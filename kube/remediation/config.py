"""Configuration of ``runtimekit remediate serve``: one YAML file, every key declared once.

Same rules as ``runtimekit.config``: an unknown key, a wrong type or a value out of range raises
``ConfigError`` naming the key and the rule. Secrets are read from files named here, never from
the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.config import ConfigError, Key, between, listen_address, resolve

from .ladders import DEFAULT_LADDERS, ladder_problem, merged

DEFAULT_TEMPLATE = {
    "node": "{node}",
    "gpu_uuids": "{gpu_uuids}",
    "gpu_indices": "{gpu_indices}",
    "fault": "{fault}",
    "alert_fingerprint": "{fingerprint}",
}


def _url(value: str) -> str | None:
    return None if value.startswith(("http://", "https://")) else "must be an http:// or https:// URL"


SCHEMA: dict[str, Key] = {
    "listen": Key(str, "0.0.0.0:9446", "HOST:PORT of the webhook receiver", listen_address),
    "db_path": Key(str, "/var/lib/runtimekit/remediation.db", "the SQLite journal (WAL)"),
    "log_level": Key(str, "info", "logging threshold", allowed=("debug", "info", "warning", "error")),
    "auth.token_file": Key((str, type(None)), None, "file holding the bearer token Alertmanager sends"),
    "auth.basic_file": Key((str, type(None)), None, "file holding USER:PASSWORD for basic auth"),
    "max_body_bytes": Key(int, 1 << 20, "larger webhook bodies are refused with 413", between(1024, 64 << 20)),
    "dry_run": Key(bool, False, "journal what would be done, change nothing"),
    "action_delay_seconds": Key((int, float), 0.0, "wait this long after an alert arrives before acting",
                                between(0, 86400)),
    "worker_interval_seconds": Key((int, float), 1.0, "seconds between journal polls of the worker",
                                   between(0.01, 60)),
    "node_label": Key(str, "node", "alert label naming the Kubernetes node"),
    # The shipped alerts (alerts/runtimekit.rules.yml) carry the agent's labels: `uuid` (GPU-…) and
    # `gpu` (the NVML index); node-level alerts (NVML down, GPUs missing) carry neither.
    "gpu_uuid_label": Key(str, "uuid", "alert label with the GPU UUID(s), comma-separated"),
    "gpu_index_label": Key(str, "gpu", "alert label with the GPU index(es), comma-separated"),
    "fault_label": Key(str, "alertname", "alert label describing the fault"),
    "action_label": Key(str, "action", "alert label with the agent's action; it chooses the ladder"),
    # Keyed by the agent's action names (ladders.py has the defaults, one comment each); merged
    # over the defaults, so naming one action leaves the others as they are.
    "ladders": Key(dict, DEFAULT_LADDERS,
                   "action name -> ordered steps (cordon, taint, drain, replace; [] for none); drain is opt-in, "
                   "e.g. replace_node: [cordon, taint, drain, replace]", ladder_problem),
    "taint_key": Key(str, "runtimekit.io/gpu-unhealthy", "the NoSchedule taint key added by the taint step"),
    # drain evicts through the Eviction API (policy/v1), so PodDisruptionBudgets are respected:
    # an eviction a PDB refuses (HTTP 429) is retried every retry_seconds until timeout_seconds,
    # then the step fails naming the pods still blocked. Nothing is ever force-deleted.
    "drain.retry_seconds": Key((int, float), 5.0, "seconds between retries of evictions a PodDisruptionBudget "
                               "blocks", between(0.01, 600)),
    "drain.timeout_seconds": Key((int, float), 300.0, "the drain step fails if pods are still blocked after this "
                                 "long", between(0, 86400)),
    "kubernetes.kubeconfig": Key((str, type(None)), None, "kubeconfig file (None: in-cluster service account)"),
    "kubernetes.context": Key((str, type(None)), None, "kubeconfig context (None: the current one)"),
    "replacement.url": Key((str, type(None)), None, "node replacement webhook (POST JSON)", _url),
    "replacement.body_template": Key(dict, DEFAULT_TEMPLATE,
                                     "JSON body; {node} {gpu_uuids} {gpu_indices} {fault} {fingerprint} {starts_at} "
                                     "are filled in"),
    "replacement.token_file": Key((str, type(None)), None, "file with a bearer token for the replacement webhook"),
    "replacement.timeout_seconds": Key((int, float), 10.0, "deadline of one replacement call", between(0.1, 300)),
    "replacement.max_attempts": Key(int, 5, "calls before the step is failed (5xx, timeouts)", between(1, 100)),
    "replacement.backoff_seconds": Key((int, float), 1.0, "first retry delay, doubled each time",
                                       between(0, 600)),
    "breaker.max_nodes": Key(int, 3, "more distinct nodes actioned within the window opens the breaker",
                             between(1, 100_000)),
    "breaker.max_percent": Key((int, float), 10.0, "more than this % of nodes actioned opens the breaker "
                               "(once breaker.min_nodes is reached)", between(0, 100)),
    # Without a floor, one node of a cluster under ten nodes is already more than 10 %.
    "breaker.min_nodes": Key(int, 2, "the percentage rule applies from this many nodes within the window "
                             "(the first min_nodes - 1 nodes are never refused by it)", between(1, 100_000)),
    "breaker.window_seconds": Key((int, float), 3600.0, "the breaker's window", between(1, 30 * 86400)),
    "cooldown_seconds": Key((int, float), 3600.0, "a node actioned for one alert is left alone this long for others",
                            between(0, 30 * 86400)),
}


@dataclass(frozen=True, slots=True)
class RemediationConfig:
    """Validated configuration; attribute names are the dotted keys with '.' → '_'."""

    listen: str
    db_path: str
    log_level: str
    auth_token_file: str | None
    auth_basic_file: str | None
    max_body_bytes: int
    dry_run: bool
    action_delay_seconds: float
    worker_interval_seconds: float
    node_label: str
    gpu_uuid_label: str
    gpu_index_label: str
    fault_label: str
    action_label: str
    ladders: Mapping[str, list[str]]
    taint_key: str
    drain_retry_seconds: float
    drain_timeout_seconds: float
    kubernetes_kubeconfig: str | None
    kubernetes_context: str | None
    replacement_url: str | None
    replacement_body_template: Mapping[str, Any]
    replacement_token_file: str | None
    replacement_timeout_seconds: float
    replacement_max_attempts: int
    replacement_backoff_seconds: float
    breaker_max_nodes: int
    breaker_max_percent: float
    breaker_min_nodes: int
    breaker_window_seconds: float
    cooldown_seconds: float


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> RemediationConfig:
    """Read the YAML file (if any), apply overrides (dotted keys), validate."""
    values = resolve(SCHEMA, path, overrides)
    if values["auth.token_file"] is None and values["auth.basic_file"] is None:
        raise ConfigError("auth.token_file: set it or auth.basic_file; the receiver never runs without auth")
    if values["breaker.min_nodes"] > values["breaker.max_nodes"]:
        raise ConfigError(f"breaker.min_nodes: must be at most breaker.max_nodes ({values['breaker.max_nodes']}), "
                          f"got {values['breaker.min_nodes']}")
    values["ladders"] = merged(values["ladders"])
    return RemediationConfig(**{key.replace(".", "_"): value for key, value in values.items()})
