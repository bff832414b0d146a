"""docs/install.md and docs/operations.md against what they describe: every installation,
component and operator-made Secret is named in the install guide, its example overlay renders with
kubectl and points the agent at the socket it mounts, every alert has its row and runbook in the
operations guide, and every relative link of both resolves."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from deploy_files import ROOT, find, host_path_of
from rendered import USER_SECRETS, components, container, installations, pod_spec, render

DOCS = ROOT / "docs"
INSTALL = DOCS / "install.md"
OPERATIONS = DOCS / "operations.md"
RULES = ROOT / "alerts" / "runtimekit.rules.yml"
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def anchors(markdown: Path) -> set[str]:
    """The anchors GitHub makes for the headings of ``markdown``."""
    found = set()
    for line in markdown.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add("".join(ch for ch in title if ch.isalnum() or ch in " -_").replace(" ", "-"))
    return found


def test_the_install_guide_names_every_installation_component_and_secret():
    text = INSTALL.read_text()
    for name in installations():
        assert f"deploy/kubernetes/{name}" in text, name
    for name in components():
        assert f"| `{name}` |" in text, f"the component {name} has no row in install.md"
    for secret in USER_SECRETS:
        assert secret in text, f"install.md does not say how to make the Secret {secret}"


def test_the_install_guides_example_overlay_renders_and_the_agent_reaches_cri_o(tmp_path):
    """The "Your own overlay" example, with the repository's folders for its remote ones."""
    text = INSTALL.read_text()
    example = text.split("# kustomization.yaml\n", 1)[1].split("```", 1)[0]
    example = re.sub(r"https://github\.com/OWNER/runtimekit//deploy/kubernetes/(\w+)\?ref=\S+(\s+#.*)?", r"../deploy/kubernetes/\1",
                     example)
    shutil.copytree(ROOT / "deploy" / "kubernetes", tmp_path / "deploy" / "kubernetes")
    overlay = tmp_path / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(example)
    documents = render(overlay)
    daemonset = find(documents, "DaemonSet", "runtimekit-agent")
    agent = container(daemonset, "agent")
    assert agent["image"].startswith("registry.example.com/runtimekit:")
    config = yaml.safe_load(find(documents, "ConfigMap", "runtimekit-agent")["data"]["runtimekit.yaml"])
    socket = config["attribution"]["cri_socket"]
    assert socket == "/run/crio/crio.sock"
    found = host_path_of(pod_spec(daemonset), agent, socket)
    assert found is not None and found[0] == socket, "the CRI-O socket is mounted from its place on the node"


def test_the_operations_guide_has_a_row_and_a_runbook_for_every_alert():
    alerts = [rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"] if "alert" in rule]
    rows = re.findall(r"^\| \[(\w+)\]\(runbooks\.md#([\w-]+)\) \|", OPERATIONS.read_text(), re.M)
    names = [name for name, _ in rows]
    assert sorted(names) == sorted(alerts), f"one row per alert: missing {set(alerts) - set(names)}, extra {set(names) - set(alerts)}"
    runbooks = anchors(DOCS / "runbooks.md")
    for name, target in rows:
        assert target == name.lower() and target in runbooks, f"{name}: no runbook section #{target}"


def test_every_relative_link_resolves():
    for page in (INSTALL, OPERATIONS, *sorted((DOCS / "reference").glob("*.md"))):
        for target, fragment in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://")) or not (target or fragment):
                continue
            path = (page.parent / target).resolve() if target else page
            assert path.exists(), f"{page.relative_to(ROOT)}: {target} does not exist"
            if fragment and path.suffix == ".md":
                assert fragment in anchors(path), f"{page.relative_to(ROOT)}: {target}#{fragment} has no such heading"
