"""Configuration of ``runtimekit dra serve``: one YAML file, every key declared once.

Same rules (``runtimekit.schema``) as the agent's configuration: an unknown key, a wrong type or a
value out of range raises ``ConfigError`` naming the key and the rule; the command prints it as one
line and exits 2. docs/dra.md lists every key with an example file.

Defaults are the kubelet's (k8s.io/dynamic-resource-allocation kubeletplugin ``KubeletRegistryDir``
and ``KubeletPluginsDir``) and the CDI's dynamic spec directory (``/var/run/cdi``,
container-device-interface pkg/cdi/doc.go). The socket paths derived from them must fit in a unix
socket address (108 bytes with the terminating NUL, Linux ``sockaddr_un.sun_path``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.config import cdi_vendor_problem
from runtimekit.grpc_unix import server_socket_problem, socket_path_problem
from runtimekit.kube.k8s_names import SUBDOMAIN, node_name_problem
from runtimekit.kube.kubeclient import KubernetesConfig
from runtimekit.schema import REQUIRED, ConfigError, Key, absolute_path, between, build, resolve, schema_of, section, setting

#: The agent's API socket when its state directory is the default one (docs/api.md).
AGENT_SOCKET = "/var/lib/runtimekit/runtimekit.sock"
#: The directory the kubelet watches for registration sockets (kubeletplugin.KubeletRegistryDir).
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
#: The kubelet's plugins directory; a driver's own directory is this joined with its name (KubeletPluginsDir).
PLUGINS_DIR = "/var/lib/kubelet/plugins"

_CDI_CLASS = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _driver_name(value: str) -> str | None:
    # resource.k8s.io/v1 ResourceSlice spec.driver: a DNS subdomain of at most 63 characters.
    if len(value) > 63 or not SUBDOMAIN.fullmatch(value):
        return "must be a lower-case DNS subdomain of at most 63 characters (gpu.runtimekit.io)"
    return None


def _cdi_kind(value: str) -> str | None:
    """A CDI kind VENDOR/CLASS: the vendor by the slicer's rule (``cdi_vendor_problem``), the class
    1-63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric."""
    vendor, slash, cdi_class = value.partition("/")
    if not slash or cdi_vendor_problem(vendor) is not None or not _CDI_CLASS.fullmatch(cdi_class):
        return ("a CDI kind is VENDOR/CLASS: a lower-case DNS subdomain starting with a letter, then 1-63 of "
                "A-Z a-z 0-9 - _ . starting and ending alphanumeric")
    return None


@dataclass(frozen=True, slots=True)
class DraConfig:
    """Validated configuration of the DRA driver (all sockets are unix socket paths)."""

    node_name: str = setting(REQUIRED, "the Node this driver runs on: its pool's name (--node-name, else the "
                             "NODE_NAME environment variable, else this key)", node_name_problem)
    driver_name: str = setting("gpu.runtimekit.io", "the DRA driver's name: ResourceSlice spec.driver, the "
                               "results it prepares, its plugin registration", _driver_name)
    agent_socket: str = setting(AGENT_SOCKET, "the node agent's runtimekit.v1 socket (its api.socket)", absolute_path)
    registry_dir: str = setting(REGISTRY_DIR, "the kubelet's plugin registration directory: the driver serves "
                                "DRIVER-reg.sock there", absolute_path)
    plugin_dir: str | None = setting(
        None, "the driver's own directory: dra.sock (the kubelet DRA service), checkpoint.json, the lock "
        "(None: /var/lib/kubelet/plugins/DRIVER)", absolute_path,
    )
    cdi_dir: str = setting("/var/run/cdi", "where per-claim CDI specs (NICs) are written; the container "
                           "runtime's CDI spec directory", absolute_path)
    whole_gpu_cdi_kind: str = setting(
        "nvidia.com/gpu", "the CDI kind a whole GPU is named by (KIND=UUID; nvidia-ctk cdi generate's)", _cdi_kind,
    )
    publish_interval_seconds: float = setting(
        5.0, "how often the agent is read again for the published ResourceSlices", between(0.05, 3600),
    )
    cleanup_interval_seconds: float = setting(
        600.0, "how often prepared claims are checked against the API server; those whose ResourceClaim "
        "is gone are unprepared", between(0.05, 86400),
    )
    agent_timeout_seconds: float = setting(
        20.0, "deadline of one call to the agent (a MIG slice takes seconds to make); the kubelet gives "
        "a whole prepare call 45 s", between(0.05, 40),
    )
    log_level: str = setting("info", "logging threshold", allowed=("debug", "info", "warning", "error"))
    kubernetes: KubernetesConfig = section(KubernetesConfig)

    @property
    def plugin_path(self) -> str:
        """The driver's own directory: ``plugin_dir``, else the kubelet's plugins directory and the driver's name."""
        return self.plugin_dir or os.path.join(PLUGINS_DIR, self.driver_name)

    @property
    def registration_socket(self) -> str:
        """``<registry_dir>/<driver>-reg.sock``, where the kubelet's plugin watcher finds the driver."""
        return os.path.join(self.registry_dir, f"{self.driver_name}-reg.sock")

    @property
    def dra_socket(self) -> str:
        """``<plugin dir>/dra.sock``: the kubelet DRA service (v1 and v1beta1 DRAPlugin)."""
        return os.path.join(self.plugin_path, "dra.sock")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.plugin_path, "checkpoint.json")

    @property
    def lock_path(self) -> str:
        """The file a running driver holds locked (flock): a second one on the same directory is refused."""
        return os.path.join(self.plugin_path, "driver.lock")


SCHEMA: dict[str, Key] = schema_of(DraConfig)


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> DraConfig:
    """Read the YAML file (if any), apply overrides (dotted keys), validate; ConfigError names the key."""
    values = resolve(SCHEMA, path, overrides)
    if values["node_name"] is REQUIRED:
        raise ConfigError("node_name: required: pass --node-name, set NODE_NAME (the pod's spec.nodeName) or the key")
    config: DraConfig = build(DraConfig, values)
    for key, socket_path in (("registry_dir", config.registration_socket), ("plugin_dir", config.dra_socket)):
        problem = server_socket_problem(socket_path)
        if problem is not None:
            raise ConfigError(f"{key}: the socket {socket_path}: {problem}; choose a shorter directory")
    problem = socket_path_problem(config.agent_socket)
    if problem is not None:
        raise ConfigError(f"agent_socket: {problem}")
    return config
