"""The Kubernetes manifests as ``kubectl kustomize`` renders them: the base (deploy/kubernetes/base),
every overlay (deploy/kubernetes/overlays/*) and the components they are made of, each rendered
once per test session. A kubectl whose kustomize predates components (v4) is refused by name: it
would render nothing of what is shipped.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from deploy_files import KUBERNETES

from tests.conftest import require_tool

BASE = KUBERNETES / "base"
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")  # what kustomize reads
MIN_KUSTOMIZE = (4, 0)  # kind: Component: kustomize v3.7, kubectl's copy from v4 (kubectl 1.21)
NAMESPACE = "runtimekit"
# Secrets an installation mounts but does not ship: the operator makes them (docs/install.md).
USER_SECRETS = {"runtimekit-remediation-token", "runtimekit-gang-webhook-tls"}

Document = dict[str, Any]


def kustomization(directory: Path) -> Document:
    """The kustomization file of ``directory`` (whichever of the names kustomize reads it has)."""
    found = [directory / name for name in KUSTOMIZATION_NAMES if (directory / name).is_file()]
    assert len(found) == 1, f"{directory}: expected one kustomization file, found {[p.name for p in found]}"
    return yaml.safe_load(found[0].read_text())


def installations() -> dict[str, Path]:
    """What a user applies: the base and each overlay, by their path under deploy/kubernetes."""
    overlays = sorted(p for p in (KUBERNETES / "overlays").iterdir() if p.is_dir())
    return {"base": BASE, **{f"overlays/{p.name}": p for p in overlays}}


def components() -> dict[str, Path]:
    """The kustomize components beside the base (folders whose kustomization is a Component)."""
    found = {}
    for folder in sorted(p for p in KUBERNETES.iterdir() if p.is_dir()):
        if any((folder / name).is_file() for name in KUSTOMIZATION_NAMES) and kustomization(folder)["kind"] == "Component":
            found[folder.name] = folder
    return found


@functools.cache
def kubectl() -> str:
    """kubectl's path, once its kustomize is known to render components (else the test fails)."""
    path = require_tool("kubectl")
    done = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    version = json.loads(done.stdout).get("kustomizeVersion", "")
    match = re.match(r"v(\d+)\.(\d+)", version)
    assert match and (int(match[1]), int(match[2])) >= MIN_KUSTOMIZE, (
        f"{path}: kustomize {version or '(not reported)'}: the manifests need kustomize v4 or later (components) and "
        "the tests its version (kubectl version reports it from 1.24 on); install kubectl 1.24 or later")
    return path


@functools.cache
def render(directory: Path) -> tuple[Document, ...]:
    """Every object ``kubectl kustomize directory`` prints, in its order."""
    done = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {directory.relative_to(KUBERNETES.parent.parent)}: {done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc is not None)


def workloads(documents: tuple[Document, ...]) -> Iterator[Document]:
    """The objects that run pods (DaemonSets and Deployments)."""
    return (d for d in documents if d["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job"))


def pod_spec(workload: Document) -> Document:
    spec: Document = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Document, name: str) -> Document:
    found = [c for c in pod_spec(workload)["containers"] if c["name"] == name]
    assert len(found) == 1, f"{workload['metadata']['name']}: expected one container {name!r}"
    return found[0]


def every_container(documents: tuple[Document, ...]) -> Iterator[tuple[Document, Document]]:
    """(workload, container) for every container and init container of every workload."""
    for workload in workloads(documents):
        spec = pod_spec(workload)
        for item in [*spec.get("initContainers", []), *spec["containers"]]:
            yield workload, item


def holding(component: str) -> list[str]:
    """The installations made with ``component`` (read from their kustomization files: no kubectl
    needed to choose the tests' parameters)."""
    folder = components()[component].resolve()
    return [name for name, path in installations().items()
            if any((path / entry).resolve() == folder for entry in kustomization(path).get("components", []))]
