"""Who may reach the agent's and the remediation service's ports, as ``kubectl kustomize`` renders
every installation: the NetworkPolicies deploy/kubernetes/base/networkpolicy.yaml (the agent's
metrics port, Prometheus only) and deploy/kubernetes/remediation/networkpolicy.yaml (the webhook,
Alertmanager only) select their pods and admit their listen port, from the selectors
docs/install.md ("Network policies") documents; that page's patches change those selectors, and its
TLS patches make the remediation service serve HTTPS with the certificate of a Secret. The shipped
Alertmanager URL is https:// only when the shipped service serves TLS."""

from __future__ import annotations

import dataclasses
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from deploy_files import ROOT, config_map_file, container_argv, find, mount_of, parse_command_line, volume
from rendered import container, holding, installations, pod_spec, render, workloads

from runtimekit.kube.remediation import config as remediation_config
from runtimekit.schema import parse_listen
from runtimekit.webconfig.model import parse_web_config

INSTALLATIONS = installations()
INSTALL = ROOT / "docs" / "install.md"
ALERTMANAGER = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
NETWORK_PATCHES = "# your overlay's patches: who may reach the agent and the remediation service\n"
TLS_PATCHES = "# your overlay's patches: the remediation webhook over HTTPS\n"
TLS_SECRET = "runtimekit-remediation-tls"

by_installation = pytest.mark.parametrize("name", list(INSTALLATIONS))


def network_policies(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def selects(policy: dict[str, Any], workload: dict[str, Any]) -> bool:
    selector = policy["spec"]["podSelector"]
    assert set(selector) <= {"matchLabels"}, "label selectors only (what the tests can evaluate)"
    return selector.get("matchLabels", {}).items() <= workload["spec"]["template"]["metadata"]["labels"].items()


def policies_of(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> list[dict[str, Any]]:
    workload = find(docs, kind, name)
    return [p for p in network_policies(docs) if p["metadata"]["namespace"] == workload["metadata"]["namespace"]
            and selects(p, workload)]


def documented_source(policy_name: str) -> dict[str, Any]:
    """The shipped "From" of ``policy_name`` in install.md's table, as one NetworkPolicyPeer."""
    row = re.search(rf"^\| `{re.escape(policy_name)}` \|.*\| pods labelled `([\w./-]+): ([\w.-]+)` in the namespace `([\w-]+)` \|$",
                    INSTALL.read_text(), re.M)
    assert row, f"install.md's Network policies table has no row for {policy_name}"
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": row[3]}},
            "podSelector": {"matchLabels": {row[1]: row[2]}}}


def only_ingress_to(policy: dict[str, Any], port: int, source: dict[str, Any]) -> None:
    label = policy["metadata"]["name"]
    assert policy["spec"]["policyTypes"] == ["Ingress"], f"{label}: ingress-only, as install.md says"
    assert policy["spec"]["ingress"] == [{"from": [source], "ports": [{"protocol": "TCP", "port": port}]}], label


# ---- the shipped policies ----------------------------------------------------------------------

@by_installation
def test_the_agents_port_is_open_to_prometheus_only(name):
    docs = render(INSTALLATIONS[name])
    agent = container(find(docs, "DaemonSet", "runtimekit-agent"), "agent")
    (port,) = [p["containerPort"] for p in agent["ports"]]  # the listen port (test_manifests.py)
    (policy,) = policies_of(docs, "DaemonSet", "runtimekit-agent")
    assert policy["metadata"]["name"] == "runtimekit-agent"
    only_ingress_to(policy, port, documented_source("runtimekit-agent"))


@pytest.mark.parametrize("name", holding("remediation"))
def test_the_remediation_webhook_is_open_to_alertmanager_only(name, tmp_path):
    docs = render(INSTALLATIONS[name])
    workload = find(docs, "Deployment", "runtimekit-remediation")
    item = container(workload, "remediation")
    args = parse_command_line(container_argv(item))
    path = tmp_path / "remediation.yaml"
    path.write_text(config_map_file(docs, workload["metadata"]["namespace"], pod_spec(workload), item, args.config))
    port = parse_listen(remediation_config.load(path).listen)[1]
    assert [p["containerPort"] for p in item["ports"]] == [port]
    (policy,) = policies_of(docs, "Deployment", "runtimekit-remediation")
    assert policy["metadata"]["name"] == "runtimekit-remediation"
    only_ingress_to(policy, port, documented_source("runtimekit-remediation"))


@by_installation
def test_no_policy_admits_everyone_or_selects_nothing(name):
    docs = render(INSTALLATIONS[name])
    for policy in network_policies(docs):
        label = policy["metadata"]["name"]
        assert policy["spec"]["podSelector"].get("matchLabels"), f"{label}: an empty podSelector selects every pod"
        assert any(selects(policy, w) for w in workloads(docs)), f"{label} selects no workload"
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from") and rule.get("ports"), f"{label}: a rule without from or ports admits every peer or port"
            for peer in rule["from"]:
                assert peer.get("namespaceSelector", {}).get("matchLabels") and peer.get("podSelector", {}).get("matchLabels"), (
                    f"{label}: each source names its namespace and its pods (an empty selector matches all)")


# ---- docs/install.md's patches -----------------------------------------------------------------

def code_block(marker: str) -> str:
    """The YAML of the install guide's code block that starts with the comment line ``marker``."""
    text = INSTALL.read_text()
    assert text.count(marker) == 1, f"install.md: expected one code block starting {marker.strip()!r}"
    before, after = text.split(marker, 1)
    indent = before.rsplit("\n", 1)[1]  # a block inside a list item is indented
    return textwrap.dedent(indent + marker + after.split("```", 1)[0])


def overlay_with(tmp_path: Path, patches: str, base: str = "overlays/dra") -> tuple[dict[str, Any], ...]:
    """An overlay of the installation ``base`` with the guide's ``patches:``, rendered."""
    shutil.copytree(ROOT / "deploy" / "kubernetes", tmp_path / "deploy" / "kubernetes")
    overlay = tmp_path / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"../deploy/kubernetes/{base}"], **yaml.safe_load(patches)}))
    return render(overlay)


@pytest.mark.parametrize("base", ["overlays/dra", "overlays/device-plugin"])
def test_the_install_guides_patches_set_prometheus_and_alertmanager(tmp_path, base):
    patches = yaml.safe_load(code_block(NETWORK_PATCHES))["patches"]
    wanted = {p["target"]["name"]: yaml.safe_load(p["patch"])[0]["value"] for p in patches}
    assert set(wanted) == {"runtimekit-agent", "runtimekit-remediation"}
    shipped = {p["metadata"]["name"]: p for p in network_policies(render(INSTALLATIONS[base]))}
    for policy in network_policies(overlay_with(tmp_path, code_block(NETWORK_PATCHES), base)):
        name = policy["metadata"]["name"]
        assert policy["spec"]["ingress"][0]["from"] == [wanted[name]], name
        assert wanted[name] != shipped[name]["spec"]["ingress"][0]["from"][0], "the example changes the selector"
        assert policy["spec"]["ingress"][0]["ports"] == shipped[name]["spec"]["ingress"][0]["ports"], name


def secret_behind(workload: dict[str, Any], item: dict[str, Any], path: str) -> tuple[str, str, dict[str, Any]]:
    mount = mount_of(item, path)
    assert mount is not None, f"{path} is in no volumeMount"
    source = volume(pod_spec(workload), mount["name"]).get("secret")
    assert source is not None, f"{path} is not mounted from a Secret"
    return source["secretName"], mount.get("subPath") or path[len(mount["mountPath"].rstrip("/")) + 1:], mount


@pytest.mark.tool("openssl")
def test_the_install_guides_tls_patches_serve_the_webhook_over_https(tmp_path, require_tool):
    from tests.security.pki import make_pki

    docs = overlay_with(tmp_path / "render", code_block(TLS_PATCHES))
    workload = find(docs, "Deployment", "runtimekit-remediation")
    item = container(workload, "remediation")
    namespace, spec = workload["metadata"]["namespace"], pod_spec(workload)
    args = parse_command_line(container_argv(item))
    text = config_map_file(docs, namespace, spec, item, args.config)
    web_config_path = yaml.safe_load(text)["listener"]["web_config_file"]
    web_text = config_map_file(docs, namespace, spec, item, web_config_path)
    tls = parse_web_config(yaml.safe_load(web_text), web_config_path).tls
    assert tls is not None, "the web configuration file serves TLS"
    for path, key in ((tls.cert_file, "tls.crt"), (tls.key_file, "tls.key")):
        secret, found_key, mount = secret_behind(workload, item, path)
        assert (secret, found_key) == (TLS_SECRET, key) and "subPath" not in mount, "the Secret mounted whole (renewals)"
    assert TLS_SECRET in INSTALL.read_text()
    for probe in ("readinessProbe", "livenessProbe"):
        assert item[probe]["httpGet"]["scheme"] == "HTTPS", probe

    # The service's own loader takes it: the web configuration (its certificate loaded) and, but
    # for listener, the very settings the shipped installation has.
    (tmp_path / "pki").mkdir()
    pki = make_pki(require_tool("openssl"), tmp_path / "pki")
    folder = tmp_path / Path(web_config_path).parent.relative_to("/")  # the container's folder, under tmp_path
    (folder / "tls").mkdir(parents=True)
    web_file = folder / Path(web_config_path).name
    web_file.write_text(web_text)
    shutil.copy(pki / "server.pem", folder / "tls" / "tls.crt")
    shutil.copy(pki / "server.key", folder / "tls" / "tls.key")
    (tmp_path / "tls.yaml").write_text(text)
    with_tls = remediation_config.load(tmp_path / "tls.yaml", {"listener.web_config_file": str(web_file)})
    assert with_tls.listener.web_config_file == str(web_file)
    shipped_docs = render(INSTALLATIONS["overlays/dra"])
    shipped = find(shipped_docs, "Deployment", "runtimekit-remediation")
    shipped_item = container(shipped, "remediation")
    (tmp_path / "shipped.yaml").write_text(config_map_file(shipped_docs, namespace, pod_spec(shipped), shipped_item, args.config))
    plain = remediation_config.load(tmp_path / "shipped.yaml")
    assert dataclasses.replace(with_tls, listener=plain.listener) == plain, "the example keeps the shipped settings"


@pytest.mark.parametrize("name", holding("remediation"))
def test_alertmanager_uses_https_only_where_the_service_serves_it(name, tmp_path):
    """Switching the URL to https:// without TLS on the service would break delivery; plain HTTP
    sends the token in the clear, which alertmanager.yml and install.md must say."""
    docs = render(INSTALLATIONS[name])
    workload = find(docs, "Deployment", "runtimekit-remediation")
    item = container(workload, "remediation")
    args = parse_command_line(container_argv(item))
    text = config_map_file(docs, workload["metadata"]["namespace"], pod_spec(workload), item, args.config)
    web_config = (yaml.safe_load(text).get("listener") or {}).get("web_config_file")
    serves_tls = web_config is not None and parse_web_config(yaml.safe_load(config_map_file(
        docs, workload["metadata"]["namespace"], pod_spec(workload), item, web_config)), web_config).tls is not None
    receivers = yaml.safe_load(ALERTMANAGER.read_text())["receivers"]
    hooks = [hook for receiver in receivers for hook in receiver.get("webhook_configs", [])]
    assert hooks
    for hook in hooks:
        scheme = urlsplit(hook["url"]).scheme
        assert scheme == ("https" if serves_tls else "http"), hook["url"]
        if serves_tls:
            assert "ca_file" in hook["http_config"].get("tls_config", {}), "the CA of the service's certificate"
    if not serves_tls:
        assert "IN THE CLEAR" in ALERTMANAGER.read_text(), "alertmanager.yml says the token crosses the network in the clear"
        assert "crosses the pod network in the clear" in INSTALL.read_text()


# ---- what a read-only mount does not do ---------------------------------------------------------

def test_the_install_guide_says_what_each_socket_mount_still_allows():
    """Each socket a node-level part reaches through a readOnly mount has its row in install.md's
    "What each part may do", which says a read-only mount does not restrict it, and the agent's
    remaining privileges are named."""
    section = INSTALL.read_text().split("### What each part may do\n", 1)[1].split("\n## ", 1)[0]
    assert "A read-only mount does not restrict a socket in it." in section
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    docs = render(INSTALLATIONS["overlays/device-plugin"])
    sockets = []
    for workload in (w for w in workloads(docs) if w["kind"] == "DaemonSet"):
        spec = pod_spec(workload)
        for item in spec["containers"]:
            for mount in item.get("volumeMounts", []):
                source = volume(spec, mount["name"]).get("hostPath")
                if source and mount.get("readOnly") and (source.get("type") == "Socket" or "kubelet/pod-resources" in source["path"]
                                                         or source["path"] == "/var/lib/runtimekit"):
                    sockets.append(source["path"])
    assert {"/run/containerd/containerd.sock", "/var/lib/kubelet/pod-resources", "/var/lib/runtimekit"} <= set(sockets)
    for path in sockets:
        shown = "runtimekit.sock" if path == "/var/lib/runtimekit" else path
        assert any(f"`{shown}`" in row or f"{shown}`" in row for row in rows), f"install.md: no row for the socket at {path}"
    for privilege in ("uid 0", "hostPID", "/host/proc", "/var/run/cdi"):
        assert privilege in section, privilege
