"""The node-level parts beside the agent, as kubectl renders the overlays that hold them, checked
against the code: the device plugin's and the DRA driver's configuration files load with their
own schema (kube/deviceplugin/config.py, kube/dra/config.py), and every socket and directory they
use is mounted from the node's path the code expects -- the kubelet's, and the agent's API socket
where the agent's DaemonSet puts it. The device plugin calls the Kubernetes API only for the offer
annotation, and then may only get and patch nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploy_files import config_map_file, container_argv, find, host_path_of, parse_command_line
from rendered import container, holding, installations, pod_spec, render

from runtimekit import config as agent_config_module
from runtimekit.kube.deviceplugin import cli as device_plugin_cli
from runtimekit.kube.deviceplugin import config as device_plugin_config
from runtimekit.kube.dra import cli as dra_cli
from runtimekit.kube.dra import config as dra_config

INSTALLATIONS = installations()
AGENT_SOCKET_ON_NODE = str(Path(agent_config_module.SCHEMA["state_dir"].default) / "runtimekit.sock")


def loaded_config(documents: tuple[dict[str, Any], ...], workload: dict[str, Any], item: dict[str, Any], tmp_path: Path,
                  load: Any, overrides: dict[str, Any] | None = None) -> Any:
    """The configuration ``item`` runs with: its --config file from the ConfigMap, loaded by ``load``."""
    args = parse_command_line(container_argv(item))
    path = tmp_path / Path(args.config).name
    path.write_text(config_map_file(documents, workload["metadata"]["namespace"], pod_spec(workload), item, args.config))
    return args, load(path, overrides or {})


def on_node(workload: dict[str, Any], item: dict[str, Any], path: str) -> tuple[str, bool]:
    """The node's path behind ``path`` in the container, and whether it is mounted writable."""
    found = host_path_of(pod_spec(workload), item, path)
    assert found is not None, f"{workload['metadata']['name']}: {path} is in no hostPath mount"
    host_path, mount = found
    return host_path, not mount.get("readOnly", False)


# ---- the device plugin -------------------------------------------------------------------------

@pytest.mark.parametrize("name", holding("device-plugin"))
def test_the_device_plugin_reaches_the_kubelet_and_the_agent(name, tmp_path):
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "DaemonSet", "runtimekit-device-plugin")
    item = container(workload, "device-plugin")
    args, config = loaded_config(documents, workload, item, tmp_path, device_plugin_config.load,
                                 {"node_name": "gpu-node-0"})  # $NODE_NAME where the annotation needs it
    assert (args.command, args.device_plugin_command) == ("device-plugin", "serve")

    assert on_node(workload, item, config.agent_socket)[0] == AGENT_SOCKET_ON_NODE
    kubelet_socket, _ = on_node(workload, item, config.kubelet_socket)
    assert kubelet_socket == device_plugin_config.KUBELET_SOCKET, "the kubelet's registration socket, where it is"
    socket_dir, writable = on_node(workload, item, config.socket_dir)
    assert socket_dir == str(Path(device_plugin_config.KUBELET_SOCKET).parent) and writable, (
        "the plugin's sockets are made in the kubelet's device-plugins directory")


@pytest.mark.parametrize("name", holding("device-plugin"))
def test_the_device_plugin_may_only_get_and_patch_nodes_for_the_offer_annotation(name, tmp_path):
    """With offer_annotation.enabled (overlays/device-plugin: the gang placer reads the annotation)
    the plugin reads the kubelet's pod-resources socket where it is, knows its node from the
    downward API, and its service account may get and patch nodes, nothing else; without it, the
    plugin has no service account token at all."""
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "DaemonSet", "runtimekit-device-plugin")
    item = container(workload, "device-plugin")
    _, config = loaded_config(documents, workload, item, tmp_path, device_plugin_config.load, {"node_name": "gpu-node-0"})
    spec = pod_spec(workload)
    if not config.offer_annotation.enabled:
        assert "serviceAccountName" not in spec and spec.get("automountServiceAccountToken") is False, (
            "without the offer annotation the device plugin never calls the Kubernetes API")
        return
    env = {e["name"]: e for e in item.get("env", [])}
    assert env[device_plugin_cli.NODE_NAME_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert config.kubernetes.kubeconfig is None, "in-cluster: the pod's service account"
    socket, writable = on_node(workload, item, config.offer_annotation.pod_resources_socket)
    assert socket == device_plugin_config.POD_RESOURCES_SOCKET and not writable
    account = spec["serviceAccountName"]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": workload["metadata"]["namespace"]}
    roles = [d["roleRef"] for d in documents if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and subject in d["subjects"]]
    assert roles == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account}]
    assert find(documents, "ClusterRole", account)["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]


# ---- the DRA driver ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", holding("dra"))
def test_the_dra_driver_reaches_the_kubelet_the_agent_and_the_cdi_directory(name, tmp_path):
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "DaemonSet", "runtimekit-dra")
    item = container(workload, "dra")
    env = {e["name"]: e for e in item.get("env", [])}
    assert env[dra_cli.NODE_NAME_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, (
        "node_name comes from the pod's node (the ConfigMap is every node's)")
    args, config = loaded_config(documents, workload, item, tmp_path, dra_config.load, {"node_name": "gpu-node-0"})
    assert (args.command, args.dra_command) == ("dra", "serve")

    assert on_node(workload, item, config.agent_socket)[0] == AGENT_SOCKET_ON_NODE
    for path, expected in ((config.registration_socket, dra_config.REGISTRY_DIR),
                           (config.dra_socket, str(Path(dra_config.PLUGINS_DIR) / config.driver_name)),
                           (config.checkpoint_path, str(Path(dra_config.PLUGINS_DIR) / config.driver_name))):
        host_path, writable = on_node(workload, item, path)
        assert str(Path(host_path).parent) == expected and writable, f"{path}: on the node {host_path}, writable {writable}"
    cdi_dir, writable = on_node(workload, item, config.cdi_dir)
    assert cdi_dir == agent_config_module.SCHEMA["slicer.cdi_dir"].default and writable, (
        "the container runtime's CDI directory, where the agent writes its slices' specs too")


@pytest.mark.parametrize("name", holding("dra"))
def test_the_dra_driver_name_is_the_device_classes_and_its_account_is_bound(name, tmp_path):
    documents = render(INSTALLATIONS[name])
    workload = find(documents, "DaemonSet", "runtimekit-dra")
    _, config = loaded_config(documents, workload, container(workload, "dra"), tmp_path, dra_config.load,
                              {"node_name": "gpu-node-0"})
    classes = [d for d in documents if d["kind"] == "DeviceClass"]
    assert classes, "the DRA driver's installation ships its DeviceClasses"
    for device_class in classes:
        for selector in device_class["spec"]["selectors"]:
            assert f"device.driver == '{config.driver_name}'" in selector["cel"]["expression"], device_class["metadata"]["name"]
    account = pod_spec(workload)["serviceAccountName"]
    bindings = [d for d in documents if d["kind"] == "ClusterRoleBinding"
                and {"kind": "ServiceAccount", "name": account, "namespace": workload["metadata"]["namespace"]} in d["subjects"]]
    assert [b["roleRef"]["name"] for b in bindings] == ["runtimekit-dra"]


@pytest.mark.parametrize("name", holding("dra"))
def test_the_agent_may_make_mig_partitions_where_the_dra_driver_runs(name):
    """The mig.runtimekit.io class makes MIG partitions through the agent (mig-partitions component)."""
    agent = container(find(render(INSTALLATIONS[name]), "DaemonSet", "runtimekit-agent"), "agent")
    env = {e["name"]: e.get("value") for e in agent.get("env", [])}
    assert env.get("NVIDIA_MIG_CONFIG_DEVICES") == "all"
    assert agent["securityContext"]["capabilities"].get("add") == ["SYS_ADMIN"]
