"""The shipped DaemonSet and systemd unit, checked against the code: the command line parses with
``runtimekit.cli.parser()``, every host path of the configuration in effect is mounted from where
``runtimekit.config.SCHEMA``'s defaults say it is on a node, the port and probes match the agent,
and nothing runs with more privilege than it needs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from deploy_files import (
    DAEMONSET,
    KUBERNETES,
    config_map_file,
    console_scripts,
    copies,
    dockerfile_stages,
    exec_form,
    exec_start_argv,
    find,
    host_path_of,
    load_documents,
    mount_of,
    systemd_unit,
    volume,
)

from runtimekit import cli
from runtimekit import config as config_module

# Keys of runtimekit.config.SCHEMA that are paths on the node. Each must be mounted into the agent's
# container, from the node's path that the key's default names (the well-known location).
HOST_PATH_KEYS = (
    "attribution.kubelet_socket",
    "attribution.cri_socket",
    "attribution.proc_root",
    "state_dir",
    "health.boot_id_path",
)
WRITABLE_KEYS = {"state_dir"}  # everything else is only read


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """``argv`` as `runtimekit` parses it; a usage error fails the test with argparse's message."""
    assert argv, "empty command line"
    assert Path(argv[0]).name in console_scripts(), f"{argv[0]!r} is not a command pyproject.toml installs"
    try:
        return cli.parser().parse_args(argv[1:])
    except SystemExit as exit:
        pytest.fail(f"`{' '.join(argv)}` is not a valid runtimekit command line (exit {exit.code})")


def test_every_manifest_is_yaml_with_kind_and_name():
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in load_documents(path):
            assert {"apiVersion", "kind", "metadata"} <= document.keys(), f"{path.name}: {document}"
            assert document["metadata"].get("name"), f"{path.name}: a {document['kind']} without a name"


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    return load_documents(DAEMONSET)


@pytest.fixture(scope="module")
def daemonset(documents) -> dict[str, Any]:
    return find(documents, "DaemonSet", "runtimekit-agent")


@pytest.fixture(scope="module")
def pod_spec(daemonset) -> dict[str, Any]:
    return daemonset["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod_spec) -> dict[str, Any]:
    found = [c for c in pod_spec["containers"] if c["name"] == "agent"]
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def argv(container) -> list[str]:
    """The container's command line: its command (or the image's ENTRYPOINT), then its args (or,
    without a command of its own, the image's CMD) -- as Kubernetes combines them."""
    final = dockerfile_stages()[-1]
    entrypoint = exec_form(final.last("ENTRYPOINT") or "[]")
    cmd = exec_form(final.last("CMD") or "[]")
    if "command" in container:
        return [*container["command"], *container.get("args", [])]
    return [*entrypoint, *container.get("args", cmd)]


@pytest.fixture(scope="module")
def agent_config(documents, daemonset, pod_spec, container, argv, tmp_path_factory) -> config_module.Config:
    """The configuration the agent runs with: the ConfigMap file named by --config, then the flags."""
    args = parse_command_line(argv)
    path = None
    if args.config:
        path = tmp_path_factory.mktemp("config") / "runtimekit.yaml"
        path.write_text(config_map_file(documents, daemonset["metadata"].get("namespace"), pod_spec, container,
                                        args.config))
    return config_module.load(path, {"listen": args.listen, "state_dir": args.state_dir})


def test_the_image_is_built_from_the_dockerfile_that_runs_runtimekit(container):
    assert container["image"].startswith("runtimekit:")
    final = dockerfile_stages()[-1]
    assert any(c.from_stage for c in copies(final)), "the final stage installs what the builder made"


def test_command_line_is_runtimekit_serve(argv):
    args = parse_command_line(argv)
    assert args.command == "serve", argv
    assert not args.sim, "the DaemonSet runs on the real node, not the simulator"


@pytest.mark.parametrize("key", HOST_PATH_KEYS)
def test_every_host_path_is_mounted_from_its_place_on_the_node(key, agent_config, pod_spec, container):
    in_container = config_module.value_at(agent_config, key)
    on_node = config_module.SCHEMA[key].default
    found = host_path_of(pod_spec, container, in_container)
    assert found is not None, (
        f"{key} is {in_container} in the container, but no hostPath volumeMount holds it "
        f"(it is {on_node} on the node)")
    host_path, mount = found
    assert host_path == on_node, f"{key}: {in_container} in the container is {host_path} on the node, not {on_node}"
    if key in WRITABLE_KEYS:
        assert not mount.get("readOnly", False), f"{key}: the agent writes {in_container}"
    else:
        assert mount.get("readOnly") is True, f"{key}: {mount['mountPath']} is only read; mount it readOnly"


def test_every_host_path_volume_is_mounted_read_only_but_the_state(pod_spec, container, agent_config):
    state = mount_of(container, agent_config.state_dir)
    for mount in container.get("volumeMounts", []):
        if "hostPath" in volume(pod_spec, mount["name"]) and mount is not state:
            assert mount.get("readOnly") is True, f"{mount['mountPath']} is mounted writable"


def test_container_port_is_the_listen_port(container, agent_config, daemonset):
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert agent_config.listen_port == config_module.DEFAULT_PORT
    assert list(ports.values()) == [agent_config.listen_port], ports
    annotations = daemonset["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get("prometheus.io/port") == str(agent_config.listen_port)


@pytest.mark.parametrize(("probe", "path"), [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")])
def test_probes(container, agent_config, probe, path):
    get = container[probe]["httpGet"]
    assert get["path"] == path
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert ports.get(get["port"], get["port"]) == agent_config.listen_port


def test_least_privilege(pod_spec, container):
    context = container.get("securityContext", {})
    assert not context.get("privileged", False)
    assert context.get("allowPrivilegeEscalation") is False
    assert context.get("readOnlyRootFilesystem") is True
    assert context.get("capabilities", {}).get("drop") == ["ALL"]
    assert not context.get("capabilities", {}).get("add"), "the agent needs no capability (see the manifest)"
    assert not pod_spec.get("hostNetwork") and not pod_spec.get("hostIPC")


# ---- systemd -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    return systemd_unit()


def test_systemd_exec_start_is_runtimekit_serve(unit):
    (exec_start,) = unit["Service"]["ExecStart"]
    argv = exec_start_argv(exec_start)
    assert Path(argv[0]).is_absolute(), "systemd wants an absolute path"
    args = parse_command_line(argv)
    assert args.command == "serve" and not args.sim


def test_systemd_state_directory_is_the_state_dir(unit):
    (exec_start,) = unit["Service"]["ExecStart"]
    args = parse_command_line(exec_start_argv(exec_start))
    (name,) = unit["Service"]["StateDirectory"]
    state_dir = args.state_dir or config_module.SCHEMA["state_dir"].default
    assert f"/var/lib/{name}" == state_dir, "ProtectSystem=strict leaves only StateDirectory= writable"


def test_systemd_sandbox_leaves_what_the_agent_needs(unit):
    service = {key: values[-1] for key, values in unit["Service"].items()}
    assert service.get("PrivateDevices", "no") in ("no", "false"), "NVML opens /dev/nvidia*"
    assert service.get("ProtectProc", "default") == "default", "attribution reads other processes' /proc entries"
    assert service.get("ProcSubset", "all") == "all", "attribution reads /proc/<pid>/"
    assert service.get("NoNewPrivileges") in ("yes", "true")
    assert service.get("ProtectSystem") == "strict"
