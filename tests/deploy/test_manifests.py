"""The node agent's DaemonSet (as kubectl renders the base and every overlay) and systemd unit,
checked against the code: the command line parses with ``runtimekit.cli.parser()``, every host
path of the configuration in effect is mounted from where ``runtimekit.config.SCHEMA``'s defaults
say it is on a node (written only where the agent writes), the port and probes match the agent,
and nothing runs with more privilege than it needs (tests/deploy/test_kustomize.py checks the
security context of every container)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploy_files import (
    config_map_file,
    container_argv,
    exec_start_argv,
    find,
    host_path_of,
    mount_of,
    parse_command_line,
    systemd_unit,
    volume,
)
from rendered import container, installations, pod_spec, render

from runtimekit import config as config_module

# Keys of runtimekit.config.SCHEMA that are paths on the node. Each must be mounted into the agent's
# container, from the node's path that the key's default names (the well-known location).
HOST_PATH_KEYS = (
    "attribution.kubelet_socket",
    "attribution.cri_socket",
    "attribution.proc_root",
    "state_dir",
    "health.boot_id_path",
    "slicer.cdi_dir",
    "topology.sys_root",
)
WRITABLE_KEYS = {"state_dir", "slicer.cdi_dir"}  # everything else is only read
INSTALLATIONS = installations()


@pytest.fixture(scope="module", params=list(INSTALLATIONS))
def documents(request) -> tuple[dict[str, Any], ...]:
    return render(INSTALLATIONS[request.param])


@pytest.fixture(scope="module")
def daemonset(documents) -> dict[str, Any]:
    return find(documents, "DaemonSet", "runtimekit-agent")


@pytest.fixture(scope="module")
def agent(daemonset) -> dict[str, Any]:
    return container(daemonset, "agent")


@pytest.fixture(scope="module")
def argv(agent) -> list[str]:
    return container_argv(agent)


@pytest.fixture(scope="module")
def agent_config(documents, daemonset, agent, argv, tmp_path_factory) -> config_module.Config:
    """The configuration the agent runs with: the ConfigMap file named by --config, then the flags."""
    args = parse_command_line(argv)
    path = None
    if args.config:
        path = tmp_path_factory.mktemp("config") / "runtimekit.yaml"
        path.write_text(config_map_file(documents, daemonset["metadata"].get("namespace"), pod_spec(daemonset), agent,
                                        args.config))
    return config_module.load(path, {"listen": args.listen, "state_dir": args.state_dir})


def test_command_line_is_runtimekit_serve(argv):
    args = parse_command_line(argv)
    assert args.command == "serve", argv
    assert not args.sim, "the DaemonSet runs on the real node, not the simulator"


@pytest.mark.parametrize("key", HOST_PATH_KEYS)
def test_every_host_path_is_mounted_from_its_place_on_the_node(key, agent_config, daemonset, agent):
    in_container = config_module.value_at(agent_config, key)
    on_node = config_module.SCHEMA[key].default
    found = host_path_of(pod_spec(daemonset), agent, in_container)
    assert found is not None, (
        f"{key} is {in_container} in the container, but no hostPath volumeMount holds it "
        f"(it is {on_node} on the node)")
    host_path, mount = found
    assert host_path == on_node, f"{key}: {in_container} in the container is {host_path} on the node, not {on_node}"
    if key in WRITABLE_KEYS:
        assert not mount.get("readOnly", False), f"{key}: the agent writes {in_container}"
    else:
        assert mount.get("readOnly") is True, f"{key}: {mount['mountPath']} is only read; mount it readOnly"


def test_the_api_socket_is_in_the_state_directory_on_the_node(agent_config, daemonset, agent):
    """Where the device plugin and the DRA driver find it (test_node_components.py)."""
    found = host_path_of(pod_spec(daemonset), agent, agent_config.api_socket)
    assert found is not None and found[0] == "/var/lib/runtimekit/runtimekit.sock", found


def test_every_host_path_volume_is_mounted_read_only_but_what_the_agent_writes(daemonset, agent, agent_config):
    written = {id(mount_of(agent, config_module.value_at(agent_config, key))) for key in WRITABLE_KEYS}
    for mount in agent.get("volumeMounts", []):
        if "hostPath" in volume(pod_spec(daemonset), mount["name"]) and id(mount) not in written:
            assert mount.get("readOnly") is True, f"{mount['mountPath']} is mounted writable"


def test_container_port_is_the_listen_port(agent, agent_config, daemonset, documents):
    ports = {p.get("name"): p["containerPort"] for p in agent["ports"]}
    assert agent_config.listen_port == config_module.DEFAULT_PORT
    assert list(ports.values()) == [agent_config.listen_port], ports
    annotations = daemonset["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get("prometheus.io/port") == str(agent_config.listen_port)
    service = find(documents, "Service", "runtimekit-agent")
    assert [(p["port"], ports[p["targetPort"]]) for p in service["spec"]["ports"]] == [(agent_config.listen_port,) * 2]


@pytest.mark.parametrize(("probe", "path"), [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")])
def test_probes(agent, agent_config, probe, path):
    get = agent[probe]["httpGet"]
    assert get["path"] == path
    ports = {p.get("name"): p["containerPort"] for p in agent["ports"]}
    assert ports.get(get["port"], get["port"]) == agent_config.listen_port


def test_the_agent_never_calls_the_kubernetes_api(daemonset):
    spec = pod_spec(daemonset)
    assert spec.get("automountServiceAccountToken") is False and "serviceAccountName" not in spec


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


def test_systemd_leaves_the_cdi_directory_writable(unit):
    """ProtectSystem=strict makes /run read-only but for ReadWritePaths= (/var/run is /run)."""
    cdi_dir = Path(config_module.SCHEMA["slicer.cdi_dir"].default)
    on_run = Path("/run") / cdi_dir.relative_to("/var/run")
    writable = [Path(p.lstrip("-")) for line in unit["Service"].get("ReadWritePaths", []) for p in line.split()]
    assert on_run in writable, f"ReadWritePaths= must hold {on_run} (slicer.cdi_dir {cdi_dir})"
    made = [exec_start_argv(line) for line in unit["Service"].get("ExecStartPre", [])]
    assert any(argv[-1] == str(on_run) and Path(argv[0]).name == "mkdir" for argv in made), "ReadWritePaths= needs it to exist"


def test_systemd_sandbox_leaves_what_the_agent_needs(unit):
    service = {key: values[-1] for key, values in unit["Service"].items()}
    assert service.get("PrivateDevices", "no") in ("no", "false"), "NVML opens /dev/nvidia*"
    assert service.get("ProtectProc", "default") == "default", "attribution reads other processes' /proc entries"
    assert service.get("ProcSubset", "all") == "all", "attribution reads /proc/<pid>/"
    assert service.get("NoNewPrivileges") in ("yes", "true")
    assert service.get("ProtectSystem") == "strict"
