"""Every installation (the base and each overlay) as ``kubectl kustomize`` renders it: every object
valid against the newest Kubernetes release kubernetes-validate has schemas for (strict: an
unknown field is an error) or, for the Prometheus Operator's kinds, against their CRD schemas; the
image, names and references consistent; and every container with the least privilege and the
resources it is sized for. The parts' own settings are checked against the code in
test_manifests.py (the agent), test_node_components.py and test_cluster_services.py."""

from __future__ import annotations

import tomllib
from decimal import Decimal

import crd_schemas
import kubernetes_validate
import pytest
from deploy_files import ROOT, container_argv, dockerfile_stages, find, parse_command_line
from kubernetes.utils import parse_quantity
from kubernetes_validate.utils import latest_version
from rendered import (
    NAMESPACE,
    USER_SECRETS,
    Document,
    components,
    every_container,
    installations,
    kustomization,
    pod_spec,
    render,
    workloads,
)

INSTALLATIONS = installations()
KUBERNETES_VERSION = latest_version()
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass", "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}
# host paths a container may write: (workload, mountPath). Everything else from the node is read-only.
WRITABLE_HOST_PATHS = {
    ("runtimekit-agent", "/var/lib/runtimekit"),  # state: health, slice journal, the API socket
    ("runtimekit-agent", "/var/run/cdi"),  # TDM slices' CDI specs
    ("runtimekit-device-plugin", "/var/lib/kubelet/device-plugins"),  # its sockets, beside the kubelet's
    ("runtimekit-dra", "/var/lib/kubelet/plugins_registry"),  # its registration socket
    ("runtimekit-dra", "/var/lib/kubelet/plugins/gpu.runtimekit.io"),  # dra.sock, checkpoint, lock
    ("runtimekit-dra", "/var/run/cdi"),  # NIC claims' CDI specs
}
# The one capability ever added: SYS_ADMIN, to the agent, by the mig-partitions component.
MIG_PARTITIONS = "mig-partitions"

by_installation = pytest.mark.parametrize("name", list(INSTALLATIONS))


def rendered(name: str) -> tuple[Document, ...]:
    return render(INSTALLATIONS[name])


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def label(doc: Document) -> str:
    return f"{doc['kind']} {doc['metadata'].get('namespace', '')}/{doc['metadata']['name']}"


def test_the_installations_and_components_are_there():
    assert {"base", "overlays/device-plugin", "overlays/dra"} <= set(INSTALLATIONS)
    assert {"device-plugin", "dra", "mig-partitions", "remediation", "gang", "monitoring"} <= set(components())


def test_every_component_is_in_an_overlay():
    """So every component is rendered and validated here (its paths are relative to the overlay)."""
    used = set()
    for folder in INSTALLATIONS.values():
        for path in kustomization(folder).get("components", []):
            used.add((folder / path).resolve())
    unused = [name for name, folder in components().items() if folder.resolve() not in used]
    assert not unused, f"components no overlay uses (so never rendered): {unused}"


@by_installation
def test_every_object_validates_against_its_schema(name):
    problems = []
    for doc in rendered(name):
        if crd_schemas.has_schema(doc):
            problems += [f"{label(doc)}: {error}" for error in crd_schemas.errors(doc)]
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{label(doc)}: {error.json_path.removeprefix('$.')}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{label(doc)}: {doc['apiVersion']} {doc['kind']} has no schema in Kubernetes {KUBERNETES_VERSION}")
    assert problems == [], f"{name} against Kubernetes {KUBERNETES_VERSION}:\n" + "\n".join(problems)


@by_installation
def test_names_are_unique_and_namespaced_objects_in_the_namespace(name):
    seen = set()
    for doc in rendered(name):
        key = (doc["apiVersion"], doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
        assert key not in seen, f"{label(doc)} twice"
        seen.add(key)
        expected = None if doc["kind"] in CLUSTER_SCOPED else NAMESPACE
        assert doc["metadata"].get("namespace") == expected, label(doc)
        assert doc["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "runtimekit", label(doc)


@by_installation
def test_every_container_runs_this_release_of_the_image_with_a_valid_command_line(name):
    for workload, container in every_container(rendered(name)):
        where = f"{label(workload)} container {container['name']}"
        assert container["image"] == f"runtimekit:{project_version()}", f"{where}: {container['image']}"
        args = parse_command_line(container_argv(container))
        assert getattr(args, "config", None), f"{where}: configured by a file (--config), from a ConfigMap"


def test_the_image_exposes_every_container_port():
    exposed = {int(port.split("/")[0]) for line in dockerfile_stages()[-1].all("EXPOSE") for port in line.split()}
    for name in INSTALLATIONS:
        for workload, container in every_container(rendered(name)):
            for port in container.get("ports", []):
                assert port["containerPort"] in exposed, f"{label(workload)}: EXPOSE {port['containerPort']} in the Dockerfile"


@by_installation
def test_least_privilege(name):
    with_mig = any(path.endswith(MIG_PARTITIONS) for path in kustomization(INSTALLATIONS[name]).get("components", []))
    for workload, container in every_container(rendered(name)):
        where = f"{label(workload)} container {container['name']}"
        spec = pod_spec(workload)
        context = container.get("securityContext", {})
        assert not context.get("privileged", False), where
        assert context.get("allowPrivilegeEscalation") is False, where
        assert context.get("readOnlyRootFilesystem") is True, where
        assert context.get("capabilities", {}).get("drop") == ["ALL"], where
        added = context.get("capabilities", {}).get("add", [])
        expected = ["SYS_ADMIN"] if with_mig and workload["metadata"]["name"] == "runtimekit-agent" else []
        assert added == expected, f"{where}: capabilities added {added}"
        seccomp = context.get("seccompProfile") or spec.get("securityContext", {}).get("seccompProfile")
        assert seccomp == {"type": "RuntimeDefault"}, where
        assert not spec.get("hostNetwork") and not spec.get("hostIPC"), where
        assert bool(spec.get("hostPID")) == (workload["metadata"]["name"] == "runtimekit-agent"), (
            f"{where}: only the agent shares the host's PID namespace (process attribution)")
        if workload["kind"] == "Deployment":  # the cluster services touch no host file: never root
            assert spec.get("securityContext", {}).get("runAsNonRoot") is True, where
        if "serviceAccountName" not in spec:
            assert spec.get("automountServiceAccountToken") is False, f"{where}: no API access, no token"


@by_installation
def test_host_paths_are_read_only_but_where_written(name):
    for workload in workloads(rendered(name)):
        spec = pod_spec(workload)
        host_volumes = {v["name"] for v in spec.get("volumes", []) if "hostPath" in v}
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in host_volumes:
                    continue
                writable = (workload["metadata"]["name"], mount["mountPath"]) in WRITABLE_HOST_PATHS
                assert mount.get("readOnly", False) is not writable, (
                    f"{label(workload)}: {mount['mountPath']} must be {'writable' if writable else 'readOnly'}")


def quantity(value: str | int) -> Decimal:
    return Decimal(parse_quantity(value))


@by_installation
def test_every_container_is_sized(name):
    for workload, container in every_container(rendered(name)):
        where = f"{label(workload)} container {container['name']}"
        resources = container.get("resources", {})
        requests, limits = resources.get("requests", {}), resources.get("limits", {})
        assert {"cpu", "memory"} <= requests.keys() and "memory" in limits, f"{where}: requests cpu and memory, limit memory"
        for kind in limits:
            assert quantity(requests[kind]) <= quantity(limits[kind]), f"{where}: {kind} request over its limit"


@by_installation
def test_every_reference_resolves(name):
    docs = rendered(name)
    for workload in workloads(docs):
        spec = pod_spec(workload)
        namespace = workload["metadata"]["namespace"]
        if "serviceAccountName" in spec:
            find([d for d in docs if d["metadata"].get("namespace") == namespace], "ServiceAccount", spec["serviceAccountName"])
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                find(docs, "ConfigMap", volume["configMap"]["name"])
            if "secret" in volume:
                assert volume["secret"]["secretName"] in USER_SECRETS, f"{label(workload)}: an undocumented Secret"
            if "persistentVolumeClaim" in volume:
                find(docs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        find(docs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for subject in binding["subjects"]:
            service_accounts = [d for d in docs if d["metadata"].get("namespace") == subject["namespace"]]
            find(service_accounts, "ServiceAccount", subject["name"])
    for binding in (d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"):
        find(docs, "ValidatingAdmissionPolicy", binding["spec"]["policyName"])


@by_installation
def test_every_service_reaches_a_named_port_of_its_pods(name):
    docs = rendered(name)
    for service in (d for d in docs if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        matching = [w for w in workloads(docs)
                    if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(matching) == 1, f"{label(service)} selects {len(matching)} workloads"
        ports = {p["name"] for c in pod_spec(matching[0])["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"{label(service)}: targetPort {port['targetPort']} names no container port"
