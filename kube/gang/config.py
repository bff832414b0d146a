"""Configuration of ``runtimekit gang serve``: one YAML file, every key declared once.

Same rules (``runtimekit.schema``) as the other services: an unknown key, a wrong type or a value
out of range raises ``ConfigError`` naming the key and the rule; the command prints it as one line
and exits 2. docs/gang.md lists every key with an example file.

The webhook's listener is the project's (``runtimekit.listener``) with its ``listener`` section, as
on the agent and the remediation service: TLS, client certificates and basic auth come from the
exporter-toolkit web configuration file ``listener.web_config_file`` (docs/security.md). While
``webhook.listen`` is set that file is required (``load``), and must be usable and have a
``tls_server_config`` (``check_webhook_web_config``, run before serving): the API server calls
webhooks over HTTPS only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.config import ListenerConfig
from runtimekit.kube.deviceplugin.names import resource_name_problem
from runtimekit.kube.k8s_names import SUBDOMAIN
from runtimekit.kube.kubeclient import KubernetesConfig
from runtimekit.schema import ConfigError, Key, between, build, listen_address, resolve, schema_of, section, setting

from .network import PRESETS, Tiers, label_key_problem

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _strings(rule: str, problem: Any) -> Any:
    """A check for a list of strings, each passing ``problem`` (text -> why not, or None)."""
    def check(values: list[Any] | tuple[Any, ...]) -> str | None:
        for i, value in enumerate(values):
            why = f"must be a string ({rule})" if not isinstance(value, str) else problem(value)
            if why:
                return f"entry {i} ({str(value)[:80]!r}): {why}"
        if len(set(map(str, values))) != len(values):
            return "each entry may appear once"
        return None
    return check


def _namespace(value: str) -> str | None:
    return None if len(value) <= 63 and _DNS_LABEL.fullmatch(value) else "a namespace is a DNS label (lower case, at most 63)"


def _tier_keys(values: list[Any] | tuple[Any, ...]) -> str | None:
    if not values:
        return "must list at least one label key (widest tier first), or be null to use tiers.preset"
    return _strings("a node label key", label_key_problem)(values)


def _device_class(value: str) -> str | None:
    return None if len(value) <= 253 and SUBDOMAIN.fullmatch(value) else "a DeviceClass name is a DNS subdomain"


@dataclass(frozen=True, slots=True)
class TiersConfig:
    """The node labels that name the network tiers (network.py)."""

    preset: str = setting("topograph", "label keys of a provider: " + ", ".join(sorted(PRESETS)), allowed=tuple(sorted(PRESETS)))
    keys: list | tuple | None = setting(None, "node label keys of the tiers, widest first (overrides preset; each tier named "
                                "by the part after the last /)", _tier_keys)

    def tiers(self) -> Tiers:
        return Tiers.of_keys(self.keys) if self.keys else Tiers.preset(self.preset)


@dataclass(frozen=True, slots=True)
class DemandConfig:
    """What a pod asks: extended resources in its containers, devices in its ResourceClaims."""

    gpu_resource: str = setting("nvidia.com/gpu", "the extended resource of whole GPUs", resource_name_problem)
    nic_resource: str | None = setting(None, "an extended resource counted as RDMA NICs (None: NICs come from claims only)",
                                       resource_name_problem)
    gpu_device_classes: list | tuple = setting(("gpu.runtimekit.io",), "DeviceClasses whose devices a claim asks are whole GPUs",
                                       _strings("a DeviceClass name", _device_class))
    nic_device_classes: list | tuple = setting(("nic.runtimekit.io",), "DeviceClasses whose devices a claim asks are RDMA NICs",
                                       _strings("a DeviceClass name", _device_class))


@dataclass(frozen=True, slots=True)
class OffersConfig:
    """Where each node's free devices are read."""

    source: str = setting("annotation", "annotation: the node annotation runtimekit.io/offer (the device plugin writes it); "
                          "resourceslices: the DRA driver's ResourceSlices less allocated ResourceClaims",
                          allowed=("annotation", "resourceslices"))
    driver: str = setting("gpu.runtimekit.io", "the DRA driver whose ResourceSlices are read (source resourceslices)", _device_class)


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """The mutating admission webhook that adds the scheduling gate to gang pods, served under the
    ``listener`` section (HTTPS: the API server calls webhooks over TLS only)."""

    listen: str | None = setting("0.0.0.0:9443", "HOST:PORT of the webhook (None: no webhook; the pod template carries the gate); "
                                 "needs listener.web_config_file with a tls_server_config", listen_address)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The decision loop's timing."""

    settle_seconds: float = setting(0.2, "after a change is seen, wait this long for more before deciding (a gang's pods "
                                    "arrive together)", between(0, 60))
    resync_seconds: float = setting(30.0, "decide again at least this often even when nothing changed", between(0.05, 3600))
    watch_timeout_seconds: int = setting(300, "each watch of the API server ends after this long and is opened again",
                                         between(1, 3600))
    release_timeout_seconds: float = setting(
        120.0, "a placed gang's devices on a node stay reserved until its pods there are bound and the node's offer "
        "shows them allocated, or this long after they bound", between(0, 86400))
    evict_unbindable: bool = setting(
        True, "a pod released to a node that turned NotReady (or went away) before the pod bound is evicted, so its Job "
        "makes a new one that is placed again; false: only an event says so")


@dataclass(frozen=True, slots=True)
class GangConfig:
    """Validated configuration of the gang placement service."""

    namespaces: list | tuple = setting((), "namespaces whose gangs are placed (empty: all)",
                               _strings("a namespace", _namespace))
    log_level: str = setting("info", "logging threshold", allowed=("debug", "info", "warning", "error"))
    kubernetes: KubernetesConfig = section(KubernetesConfig)
    tiers: TiersConfig = section(TiersConfig)
    demand: DemandConfig = section(DemandConfig)
    offers: OffersConfig = section(OffersConfig)
    webhook: WebhookConfig = section(WebhookConfig)
    listener: ListenerConfig = section(ListenerConfig)
    controller: ControllerConfig = section(ControllerConfig)


SCHEMA: dict[str, Key] = schema_of(GangConfig)
WEB_CONFIG_KEY = "listener.web_config_file"


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> GangConfig:
    """Read the YAML file (if any), apply overrides (dotted keys), validate; ConfigError names the key."""
    values = resolve(SCHEMA, path, overrides)
    if values["webhook.listen"] is not None and values[WEB_CONFIG_KEY] is None:
        raise ConfigError(f"{WEB_CONFIG_KEY}: required while webhook.listen is set: a web configuration file with a "
                          "tls_server_config (the API server calls webhooks over HTTPS only); or set webhook.listen to null")
    if values["demand.gpu_resource"] == values["demand.nic_resource"]:
        raise ConfigError("demand.nic_resource: must differ from demand.gpu_resource")
    if set(values["demand.gpu_device_classes"]) & set(values["demand.nic_device_classes"]):
        raise ConfigError("demand.nic_device_classes: a DeviceClass cannot be both a GPU and a NIC class")
    config: GangConfig = build(GangConfig, values)
    try:
        config.tiers.tiers()
    except ValueError as error:
        raise ConfigError(f"tiers.keys: {error}") from None
    return config


def check_webhook_web_config(config: GangConfig) -> None:
    """Before the webhook is served: ``ConfigError`` naming ``listener.web_config_file``, the file and
    the rule when the file cannot be read, breaks a rule, names a certificate that cannot be loaded,
    or has no ``tls_server_config``. Nothing to check without ``webhook.listen``. ``load`` reads the
    configuration alone, so that a deployment's configuration can be checked away from its Secrets."""
    path = config.listener.web_config_file
    if config.webhook.listen is None or path is None:
        return
    from runtimekit.webconfig import load_web_config

    web, _ = load_web_config(path, WEB_CONFIG_KEY)
    if web.tls is None:
        raise ConfigError(f"{WEB_CONFIG_KEY}: {path}: needs a tls_server_config (cert_file, key_file) while webhook.listen "
                          "is set: the API server calls webhooks over HTTPS only")
