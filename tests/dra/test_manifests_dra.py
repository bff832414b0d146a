"""The DRA driver's shipped manifests (deploy/kubernetes/dra) and example claims (deploy/examples),
validated as the API server validates them (a real one cannot run here): every document against
the strict OpenAPI schema of each Kubernetes release from 1.34 (the first with resource.k8s.io/v1)
to the newest kubernetes-validate ships, and against what the driver publishes and accepts: the
classes select the device types it publishes, the opaque configurations parse as its SliceConfig,
capacity requests fit its request policies, the four-GPU claim ties each GPU to its NIC, and the
driver's role grants what it calls."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from runtimekit.kube.dra.sliceconfig import parse_slice_config
from tests.kube_resource_validation import schema_errors

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted([*(ROOT / "deploy" / "examples").glob("*.yaml"), *(ROOT / "deploy" / "kubernetes" / "dra").glob("*.yaml")])
VERSIONS = [f"v{v}" for v in all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 34)]
DRIVER = "gpu.runtimekit.io"
PUBLISHED_TYPES = {"gpu", "mig", "nic"}  # kube/dra/devices.py: the "type" attribute of every published device


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def every(kind: str) -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in documents(path) if doc["kind"] == kind]


def classes() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in every("DeviceClass")}


def claim_specs() -> dict[str, dict[str, Any]]:
    """Every example claim's spec by template (or claim) name."""
    found = {doc["metadata"]["name"]: doc["spec"]["spec"] for doc in every("ResourceClaimTemplate")}
    return found | {doc["metadata"]["name"]: doc["spec"] for doc in every("ResourceClaim")}


def test_the_manifests_are_there_and_the_schemas_cover_the_releases_with_resource_v1():
    assert {path.name for path in MANIFESTS} >= {"deviceclasses.yaml", "tdm-share.yaml", "mig-1g.yaml", "gpus-with-nics.yaml"}
    assert VERSIONS[0] == "v1.34.0" and len(VERSIONS) >= 2


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=[path.name for path in MANIFESTS])
def test_every_document_validates_against_the_api_schema(path, version):
    for doc in documents(path):
        assert schema_errors(doc, version) == [], f"{path.name}: {doc['kind']} {doc['metadata']['name']}"


def test_the_validation_refuses_what_the_api_server_refuses():
    (template,) = [doc for doc in every("ResourceClaimTemplate") if doc["metadata"]["name"] == "tdm-half-gpu"]
    request = template["spec"]["spec"]["devices"]["requests"][0]
    request["exactly"]["deviceClass"] = request["exactly"].pop("deviceClassName")  # a typo
    assert schema_errors(template, "v1.35.0")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):  # resource.k8s.io/v1 did not exist yet
        kubernetes_validate.validate(classes()["gpu.runtimekit.io"], "1.33.0", strict=True)


def test_the_classes_select_the_drivers_device_types():
    found = classes()
    assert set(found) == {"gpu.runtimekit.io", "tdm.runtimekit.io", "mig.runtimekit.io", "nic.runtimekit.io"}
    selected = {}
    for name, doc in found.items():
        (selector,) = doc["spec"]["selectors"]
        expression = selector["cel"]["expression"]
        assert f"device.driver == '{DRIVER}'" in expression
        (selected[name],) = re.findall(rf"device\.attributes\['{re.escape(DRIVER)}'\]\.type == '(\w+)'", expression)
    assert selected == {"gpu.runtimekit.io": "gpu", "tdm.runtimekit.io": "gpu", "mig.runtimekit.io": "mig", "nic.runtimekit.io": "nic"}
    assert set(selected.values()) == PUBLISHED_TYPES


def test_the_tdm_class_marks_its_devices_as_shares_with_a_slice_config():
    (config,) = classes()["tdm.runtimekit.io"]["spec"]["config"]
    assert config["opaque"]["driver"] == DRIVER
    assert parse_slice_config(config["opaque"]["parameters"]).compute is None  # nothing set: the claim says how much
    assert "config" not in classes()["gpu.runtimekit.io"]["spec"]


def test_the_example_claims_use_shipped_classes_and_configurations_the_driver_parses():
    names = set(classes())
    for claim, spec in claim_specs().items():
        devices = spec["devices"]
        requests = {r["name"]: r["exactly"] for r in devices["requests"]}
        assert {r["deviceClassName"] for r in requests.values()} <= names, claim
        for constraint in devices.get("constraints", []):
            assert set(constraint["requests"]) <= set(requests), claim
        for config in devices.get("config", []):
            assert config["opaque"]["driver"] == DRIVER
            parse_slice_config(config["opaque"]["parameters"])  # raises, naming the field, when it would not parse


def test_the_tdm_share_asks_the_scheduler_and_the_driver_for_the_same_amounts():
    spec = claim_specs()["tdm-half-gpu"]["devices"]
    (request,) = spec["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"compute": "50", "memory": "2Gi"}
    (config,) = spec["config"]
    parsed = parse_slice_config(config["opaque"]["parameters"])
    assert (parsed.compute, parsed.memory_mib) == (50, 2048)
    assert parsed.memory_mib % 128 == 0  # on the memory request policy's grid (kube/dra/devices.py MEMORY_STEP)


def test_the_mig_example_asks_for_a_1g_profile_of_the_mig_class():
    (request,) = claim_specs()["mig-1g"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.runtimekit.io"
    (selector,) = request["exactly"]["selectors"]
    assert "profile.startsWith('1g.')" in selector["cel"]["expression"]


def test_four_gpus_each_pinned_to_a_nic_on_its_pcie_root():
    devices = claim_specs()["four-gpus-four-nics"]["devices"]
    requests = {r["name"]: r["exactly"]["deviceClassName"] for r in devices["requests"]}
    assert sorted(requests.values()) == ["gpu.runtimekit.io"] * 4 + ["nic.runtimekit.io"] * 4
    pairs = [c["requests"] for c in devices["constraints"] if c.get("matchAttribute") == "resource.kubernetes.io/pcieRoot"]
    assert len(pairs) == 4
    assert sorted(tuple(sorted(requests[name] for name in pair)) for pair in pairs) == [("gpu.runtimekit.io", "nic.runtimekit.io")] * 4
    assert len({name for pair in pairs for name in pair}) == 8  # each device in exactly one pair


def test_every_example_pod_names_a_claim_template_of_its_file():
    for path in MANIFESTS:
        found = documents(path)
        templates = {doc["metadata"]["name"] for doc in found if doc["kind"] == "ResourceClaimTemplate"}
        for pod in (doc for doc in found if doc["kind"] == "Pod"):
            claims = {c["name"]: c for c in pod["spec"]["resourceClaims"]}
            assert {c["resourceClaimTemplateName"] for c in claims.values()} <= templates, path.name
            used = {c["name"] for container in pod["spec"]["containers"] for c in container["resources"]["claims"]}
            assert used == set(claims), path.name


def test_the_driver_role_grants_what_it_calls_to_its_service_account():
    (role,) = every("ClusterRole")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    slices = {("resource.k8s.io", "resourceslices", verb) for verb in ("list", "create", "update", "delete")}  # no watch: it lists
    assert granted == slices | {("resource.k8s.io", "resourceclaims", "get"), ("", "nodes", "get")}
    (binding,) = every("ClusterRoleBinding")
    (account,) = every("ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]

