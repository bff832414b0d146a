"""Configuration of ``runtimekit device-plugin serve``: one YAML file, every key declared once.

Same rules (``runtimekit.schema``) as the agent's configuration: an unknown key, a wrong type or a
value out of range raises ``ConfigError`` naming the key and the rule; the command prints it as one
line and exits 2. docs/deviceplugin.md lists every key with an example file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.grpc_unix import server_socket_problem, socket_path_problem
from runtimekit.kube.k8s_names import node_name_problem
from runtimekit.kube.kubeclient import KubernetesConfig
from runtimekit.schema import ConfigError, Key, absolute_path, between, build, resolve, schema_of, section, setting

from .names import endpoint_of, mig_resource, resource_name_problem

#: The kubelet's registration socket (k8s.io/kubelet deviceplugin/v1beta1 constants.go KubeletSocket).
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
#: The agent's API socket when its state directory is the default one (docs/api.md).
AGENT_SOCKET = "/var/lib/runtimekit/runtimekit.sock"
#: The kubelet's pod-resources socket (k8s.io/kubelet pkg/apis/podresources: <root>/pod-resources/kubelet.sock).
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


def _mig_prefix(value: str) -> str | None:
    # Checked with a typical profile appended: the prefix plus a profile must be a resource name.
    problem = resource_name_problem(mig_resource(value, "1g.10gb"))
    return None if problem is None else f"with a profile appended, {value}1g.10gb is no resource name: {problem}"


def _cdi_kind(value: str) -> str | None:
    problem = resource_name_problem(value)  # a CDI kind is "vendor/class": the same shape
    return None if problem is None else f"a CDI kind is vendor/class: {problem}"


@dataclass(frozen=True, slots=True)
class OfferAnnotationConfig:
    """The node annotation runtimekit.io/offer: what this node offers the gang placer (docs/gang.md),
    written on this node's Node object (docs/deviceplugin.md, "The offer annotation for gang
    placement"). Off by default: it needs a service account allowed to get and patch nodes."""

    enabled: bool = setting(False, "keep the annotation current (needs node_name and the nodes get, patch permission)")
    pod_resources_socket: str = setting(
        POD_RESOURCES_SOCKET, "the kubelet's pod-resources socket: which devices pods hold (List)", absolute_path
    )
    poll_seconds: float = setting(
        5.0, "how often the pod-resources API is read (the devices' health changes are written at once); also "
        "the first wait after a failure, doubled after each failure in a row up to resync_seconds",
        between(0.05, 3600),
    )
    resync_seconds: float = setting(
        60.0, "how often the Node's annotation is read back and written again when it differs (someone changed "
        "or removed it)", between(1, 86400),
    )


@dataclass(frozen=True, slots=True)
class DevicePluginConfig:
    """Validated configuration of the device plugin (all sockets are unix socket paths)."""

    agent_socket: str = setting(AGENT_SOCKET, "the node agent's runtimekit.v1 socket (its api.socket)", absolute_path)
    kubelet_socket: str = setting(KUBELET_SOCKET, "the kubelet's device-plugin registration socket", absolute_path)
    plugin_dir: str | None = setting(
        None, "where the plugin's own sockets are made (None: the kubelet socket's directory, as the kubelet "
        "requires: it joins RegisterRequest.endpoint to its own device-plugins directory)", absolute_path,
    )
    resource_name: str = setting("nvidia.com/gpu", "the extended resource of whole GPUs", resource_name_problem)
    mig_prefix: str = setting(
        "nvidia.com/mig-", "MIG devices are advertised as PREFIX + profile, one resource per profile "
        "(NVIDIA's mixed strategy: nvidia.com/mig-3g.40gb)", _mig_prefix,
    )
    mig: bool = setting(True, "advertise existing MIG devices (false: whole GPUs only)")
    visible_devices_env: bool = setting(
        True, "Allocate sets NVIDIA_VISIBLE_DEVICES to the devices' UUIDs (the NVIDIA container runtime reads it)"
    )
    cdi: bool = setting(True, "Allocate names the devices as CDI devices (CDI_KIND=UUID) in cdi_devices")
    cdi_kind: str = setting("nvidia.com/gpu", "the CDI kind of the devices' names (nvidia-ctk cdi generate's)",
                            _cdi_kind)
    with_nics: bool = setting(
        True, "Allocate asks the agent for the RDMA NICs nearest the GPUs and passes their device nodes in"
    )
    agent_timeout_seconds: float = setting(
        2.0, "deadline of one call to the agent; GetPreferredAllocation falls back when it passes", between(0.05, 60)
    )
    health_poll_seconds: float = setting(
        5.0, "how often the devices are read again (GetNode), and the wait before the health stream "
        "(WatchHealth) is opened again after it broke", between(0.05, 3600),
    )
    kubelet_poll_seconds: float = setting(
        1.0, "how often the kubelet socket is checked for a restart (re-created: register again)", between(0.05, 60)
    )
    log_level: str = setting("info", "logging threshold", allowed=("debug", "info", "warning", "error"))
    node_name: str | None = setting(
        None, "the Node this plugin runs on (--node-name, else the NODE_NAME environment variable, else this key); "
        "required with offer_annotation.enabled", node_name_problem,
    )
    offer_annotation: OfferAnnotationConfig = section(OfferAnnotationConfig)
    kubernetes: KubernetesConfig = section(KubernetesConfig)

    @property
    def socket_dir(self) -> str:
        """The directory of the plugin's sockets: ``plugin_dir``, else the kubelet socket's."""
        return self.plugin_dir or os.path.dirname(self.kubelet_socket)


SCHEMA: dict[str, Key] = schema_of(DevicePluginConfig)


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> DevicePluginConfig:
    """Read the YAML file (if any), apply overrides (dotted keys), validate; ConfigError names the key."""
    values = resolve(SCHEMA, path, overrides)
    if not values["visible_devices_env"] and not values["cdi"]:
        raise ConfigError("cdi: set it or visible_devices_env; with neither a container would get no device")
    if values["mig_prefix"] == values["resource_name"]:
        raise ConfigError("mig_prefix: must differ from resource_name")
    if values["offer_annotation.enabled"] and values["node_name"] is None:
        raise ConfigError("node_name: required with offer_annotation.enabled: pass --node-name, set NODE_NAME "
                          "(the pod's spec.nodeName) or the key")
    config: DevicePluginConfig = build(DevicePluginConfig, values)
    for key, path in (("kubelet_socket", config.kubelet_socket), ("agent_socket", config.agent_socket),
                      ("offer_annotation.pod_resources_socket", config.offer_annotation.pod_resources_socket)):
        problem = socket_path_problem(path)
        if problem is not None:
            raise ConfigError(f"{key}: {problem}")
    problem = server_socket_problem(os.path.join(config.socket_dir, endpoint_of(config.resource_name)))
    if problem is not None:
        raise ConfigError(f"{'plugin_dir' if config.plugin_dir else 'kubelet_socket'}: the plugin sockets' folder "
                          f"{config.socket_dir}: {problem}")
    return config
