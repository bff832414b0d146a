"""The node-level parts keep running on a node the remediation service has taken out of service.

Its taint step adds a NoSchedule taint (kube/remediation/actions.py ``taint``, key ``taint_key``).
A DaemonSet pod that does not tolerate it cannot come back once deleted (a rolling upgrade, an
eviction): the agent's health series then vanish, the alert resolves, and the service untaints and
uncordons a node whose GPU is still bad. So every DaemonSet of every installation (as kubectl
renders it) tolerates that taint -- the default one from the code, and the one the installation's
own remediation service is configured to add -- matched as the scheduler matches tolerations
(kube/gang/nodefit.py ``tolerates``: a toleration of no key with operator Exists tolerates it too).
docs/install.md ("Tolerations") tells an operator who changes taint_key to add a toleration of the
new key to every DaemonSet with one patch; that patch, in an overlay of each installation, does it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_files import ROOT, config_map_file, container_argv, find, parse_command_line
from rendered import container, holding, installations, pod_spec, render

from runtimekit.kube.gang.nodefit import tolerates
from runtimekit.kube.remediation import actions
from runtimekit.kube.remediation import config as remediation_config

INSTALLATIONS = installations()
INSTALL = ROOT / "docs" / "install.md"
DEFAULT_TAINT = actions.taint(remediation_config.RemediationConfig())  # what the taint step adds by default


def daemonsets(documents: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == "DaemonSet"]


def untolerating(documents: tuple[dict[str, Any], ...], taint: dict[str, str]) -> list[str]:
    """The names of the DaemonSets whose pods do not tolerate ``taint``."""
    return [d["metadata"]["name"] for d in daemonsets(documents)
            if not tolerates(pod_spec(d).get("tolerations") or [], taint)]


def test_the_default_taint_is_the_remediation_taint():
    """The taint the tests below look for: the taint_key default, as a NoSchedule taint."""
    assert DEFAULT_TAINT["key"] == remediation_config.SCHEMA["taint_key"].default
    assert DEFAULT_TAINT["effect"] == "NoSchedule"


@pytest.mark.parametrize("name", list(INSTALLATIONS))
def test_every_daemonset_tolerates_the_default_remediation_taint(name):
    documents = render(INSTALLATIONS[name])
    assert daemonsets(documents), f"{name}: no DaemonSet rendered"
    missing = untolerating(documents, DEFAULT_TAINT)
    assert not missing, (
        f"{name}: not tolerating {DEFAULT_TAINT['key']}:{DEFAULT_TAINT['effect']}, the taint the remediation service "
        f"adds: {', '.join(missing)} (a deleted pod would not come back on a node being remediated)")


def configured_taint(documents: tuple[dict[str, Any], ...], tmp_path: Path) -> dict[str, str]:
    """The taint the rendered remediation service adds: its ConfigMap's file, loaded with its schema."""
    workload = find(documents, "Deployment", "runtimekit-remediation")
    item = container(workload, "remediation")
    args = parse_command_line(container_argv(item))
    path = tmp_path / Path(args.config).name
    path.write_text(config_map_file(documents, workload["metadata"]["namespace"], pod_spec(workload), item, args.config))
    return actions.taint(remediation_config.load(path))


@pytest.mark.parametrize("name", holding("remediation"))
def test_every_daemonset_tolerates_the_taint_of_the_installations_remediation_service(name, tmp_path):
    """The taint_key of the remediation service's own configuration, as this installation ships it."""
    documents = render(INSTALLATIONS[name])
    taint = configured_taint(documents, tmp_path)
    missing = untolerating(documents, taint)
    assert not missing, f"{name}: not tolerating {taint['key']}:{taint['effect']}: {', '.join(missing)}"


@pytest.mark.parametrize("name", holding("remediation"))
def test_the_install_guides_toleration_patch_follows_a_taint_key_of_your_own(name, tmp_path):
    """An overlay of the installation that sets taint_key to the guide's example key, with and
    without the guide's patch: without it the DaemonSets do not tolerate the new taint, with it all do."""
    patches = yaml.safe_load(INSTALL.read_text().split("**Tolerations.**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0])
    [key] = {op["value"]["key"] for patch in patches for op in yaml.safe_load(patch["patch"])}
    shutil.copytree(ROOT / "deploy" / "kubernetes", tmp_path / "deploy" / "kubernetes")
    shipped = find(render(INSTALLATIONS[name]), "ConfigMap", "runtimekit-remediation")["data"]["remediation.yaml"]
    own_key = {"target": {"kind": "ConfigMap", "name": "runtimekit-remediation"},
               "patch": yaml.safe_dump([{"op": "replace", "path": "/data/remediation.yaml",
                                         "value": f"{shipped}taint_key: {key}\n"}])}
    for with_guide in (False, True):
        overlay = tmp_path / f"mine-{with_guide}"
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"../deploy/kubernetes/{name}"],
            "patches": [own_key, *(patches if with_guide else [])]}))
        documents = render(overlay)
        taint = configured_taint(documents, overlay)
        assert taint["key"] == key
        missing = untolerating(documents, taint)
        if with_guide:
            assert not missing, f"with install.md's patch, not tolerating {key}: {', '.join(missing)}"
        else:
            assert set(missing) == {d["metadata"]["name"] for d in daemonsets(documents)}, missing
