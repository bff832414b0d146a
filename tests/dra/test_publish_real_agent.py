"""Publishing end to end: the DRA driver's process (``DraService``, as ``runtimekit dra serve`` runs
it, from a configuration file and a kubeconfig) on a real agent process (``runtimekit serve --sim``)
publishing through the official ``kubernetes`` client to the fake resource.k8s.io/v1 API server
(tests/kube_fake_resource.py: a real API server cannot run here; the fake validates every slice
with the strict schema of its release, kubernetes-validate, and the Go validation's rules).

- **DGX H100** (every GPU in TDM mode, each with its own ConnectX-7 NIC on its PCIe switch):
  every GPU and NIC is published with the attributes GetNode and GetTopology report; each GPU shares
  ``resource.kubernetes.io/pcieRoot`` with its own NIC (the scenario's table), so the four-GPUs-
  four-NICs example (deploy/examples/gpus-with-nics.yaml) can be allocated; XID 79 on one GPU
  (fallen off the bus) withdraws it at a higher pool generation, and a simulated reboot brings
  it back. Every request the driver made is one its shipped ClusterRole grants, and every slice it
  wrote one its shipped admission policy lets it create, update and delete.
- **DGX A100** (GPUs 0 and 1 start in MIG mode): every placement of every profile GetNode lists
  is published, consuming its memory-slice counters of the GPU's counter set, in the layout of
  the API server's release (1.34: counters beside the devices; 1.35: in their own slice).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtimekit._proto.runtimekit.v1 import node_pb2
from runtimekit.client import inject_remote, reboot_remote
from runtimekit.kube.agentclient import AgentClient
from runtimekit.kube.dra.config import load
from runtimekit.kube.dra.service import DraService
from runtimekit.kube.kubeclient import api_client
from runtimekit.sim import load_scenario
from tests.agent_process import ROOT, Agent, start_agent, without_pods
from tests.dra.admission_policy import admit, request
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import serve
from tests.kube_resource_validation import pool_problems, schema_errors, slice_errors

DRIVER = "gpu.runtimekit.io"
NODE = "gpu-node-1"
STANDARD = "resource.kubernetes.io/"
EXAMPLES = ROOT / "deploy" / "examples"
CLASSES = ROOT / "deploy" / "kubernetes" / "dra" / "deviceclasses.yaml"
RBAC = ROOT / "deploy" / "kubernetes" / "dra" / "rbac.yaml"
XID_GPU = 3  # the GPU that falls off the bus


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short path: the agent's and the driver's unix sockets live under it (108 bytes at most)."""
    path = Path(tempfile.mkdtemp(prefix="rk-dra-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Rig:
    agent: Agent
    api: FakeResourceApi
    service: DraService
    view: AgentClient  # the test's own runtimekit.v1 client: what the agent reports

    def pool(self) -> list[dict[str, Any]]:
        return self.api.pool(DRIVER, NODE)

    def devices(self) -> dict[str, dict[str, Any]]:
        return {device["name"]: device for item in self.pool() for device in item["spec"].get("devices") or []}

    def generation(self) -> int | None:
        """The pool's generation once it is complete and consistent (every slice written), else None."""
        pool = self.pool()
        specs = {(item["spec"]["pool"]["generation"], item["spec"]["pool"]["resourceSliceCount"]) for item in pool}
        if len(specs) != 1:
            return None
        ((generation, count),) = specs
        return generation if count == len(pool) else None


@asynccontextmanager
async def rig(short_dir: Path, scenario: str, version: str) -> AsyncIterator[Rig]:
    """A real agent on ``scenario`` (its pods left out: DRA hands the GPUs out, no device-plugin pod
    holds one), the fake API server of release ``version`` and the driver's process."""
    agent = await asyncio.to_thread(start_agent, short_dir, "--sim", without_pods(scenario, short_dir), "--sim-load", "idle",
                                    "--sim-processes", "0", "--interval", "0.2", "--seed", "3")
    api = FakeResourceApi(version=version, nodes=(NODE,))
    runner, url = await serve(api.app)
    (short_dir / "kubeconfig").write_text(api.kubeconfig(url))
    (short_dir / "dra.yaml").write_text(yaml.safe_dump({
        "node_name": NODE, "agent_socket": str(short_dir / "state" / "runtimekit.sock"),
        "registry_dir": str(short_dir / "registry"), "plugin_dir": str(short_dir / "plugin"), "cdi_dir": str(short_dir / "cdi"),
        "publish_interval_seconds": 0.2, "kubernetes": {"kubeconfig": str(short_dir / "kubeconfig")}}))
    config = load(short_dir / "dra.yaml")
    client = api_client(config.kubernetes.kubeconfig)
    service = DraService(config, client)
    view = AgentClient(config.agent_socket, 5.0)
    task = asyncio.create_task(service.run())
    try:
        yield Rig(agent, api, service, view)
        assert not task.done(), task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await view.close()
        client.close()
        await runner.cleanup()
        await asyncio.to_thread(agent.stop)


async def eventually(condition: Callable[[], Any], what: str, rig: Rig, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never: {what}\nagent log:\n{rig.agent.log()[-3000:]}"
        await asyncio.sleep(0.05)
    return value


def assert_valid(rig: Rig, version: str) -> None:
    """Every stored slice passes the API server's validation of ``version``, the pool is consistent."""
    assert rig.api.rejected == []
    for item in rig.pool():
        assert schema_errors(item, version) == [] and slice_errors(item, int(version.split(".")[1])) == [], item
    assert pool_problems(rig.pool()) == []


def value(device: dict[str, Any], attribute: str) -> Any:
    """The published value of ``attribute`` (unqualified: the driver's own domain)."""
    found = device["attributes"].get(attribute) or device["attributes"].get(attribute.removeprefix(DRIVER + "/"))
    assert found is not None, f"{device['name']} has no attribute {attribute}"
    (only,) = found.values()
    return only


def place_attributes(place: node_pb2.DevicePlace | node_pb2.Nic) -> dict[str, Any]:
    """What GetTopology reports of a GPU's or a NIC's place, as the published attributes name it."""
    return {STANDARD + "pcieRoot": place.pcie_root, "numaNode": place.numa_node, "cpuSocket": place.socket}


def assert_gpu_attributes(device: dict[str, Any], gpu: node_pb2.Device, place: node_pb2.DevicePlace) -> None:
    wanted = {"uuid": gpu.ref.uuid, "index": gpu.ref.index, "productName": gpu.model, "architecture": gpu.architecture,
              STANDARD + "pciBusID": gpu.ref.pci_address, **place_attributes(place)}
    assert {name: value(device, name) for name in wanted} == wanted, device["name"]


def assert_nic_attributes(device: dict[str, Any], nic: node_pb2.Nic) -> None:
    wanted = {"type": "nic", "name": nic.name, "rateGbps": nic.rate_gbps, STANDARD + "pciBusID": nic.pci_address,
              **place_attributes(nic)}
    assert {name: value(device, name) for name in wanted} == wanted, device["name"]


def rbac_request(method: str, path: str) -> tuple[str, str, str] | None:
    """(API group, resource, verb) of a request as the API server authorizes it; None for GET
    /version, which every client may read (system:public-info-viewer)."""
    path = path.split("?")[0].rstrip("/")
    if method == "GET" and path == "/version":
        return None
    match = re.fullmatch(r"/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<resource>[^/]+)(?P<name>/[^/]+)?", path)
    assert match is not None, f"{method} {path}: not a resource request"
    collection = match["name"] is None
    verb = {"GET": "list" if collection else "get", "POST": "create", "PUT": "update", "DELETE": "delete"}[method]
    return match["group"] or "", match["resource"], verb


def assert_role_allows(requests: list[tuple[str, str]]) -> None:
    """Every request the driver made is one its shipped ClusterRole grants (deploy/kubernetes/dra/rbac.yaml)."""
    (role,) = [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc["kind"] == "ClusterRole"]
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    asked = {found for method, path in requests if (found := rbac_request(method, path)) is not None}
    assert asked - granted == set() and ("resource.k8s.io", "resourceslices", "delete") in asked


def assert_policy_admits(slices: dict[str, dict[str, Any]]) -> None:
    """Every slice the driver wrote, the shipped admission policy lets the driver on NODE create,
    update and delete (deploy/kubernetes/dra/admission-policy.yaml: its own node's slices only)."""
    assert slices
    for body in slices.values():
        for operation, objects in (("CREATE", {"new": body}), ("UPDATE", {"old": body, "new": body}), ("DELETE", {"old": body})):
            denied = admit(request(operation, node=NODE, **objects))
            assert denied is None, f"{operation} {body['metadata']['name']}: {denied}"


# -- the four-GPUs-four-NICs example, allocated as the scheduler would ----------------------------

def class_types() -> dict[str, str]:
    """DeviceClass name -> the device type its CEL selector asks for (the shipped classes)."""
    found = {}
    for doc in yaml.safe_load_all(CLASSES.read_text()):
        (selector,) = doc["spec"]["selectors"]
        (found[doc["metadata"]["name"]],) = re.findall(r"\.type == '(\w+)'", selector["cel"]["expression"])
    return found


def allocate(claim: dict[str, Any], devices: dict[str, dict[str, Any]]) -> dict[str, str] | None:
    """request name -> device name satisfying the claim's requests (one device each, of its class's
    type, no device twice: a whole GPU's default capacity is all of it) and every ``matchAttribute``
    constraint (all devices of the listed requests have the attribute, with one value), as the
    scheduler's allocator does; None when no allocation exists."""
    types = class_types()
    requests = [(r["name"], types[r["exactly"]["deviceClassName"]]) for r in claim["devices"]["requests"]]
    constraints = [(set(c["requests"]), c["matchAttribute"]) for c in claim["devices"].get("constraints", [])]

    def fits(chosen: dict[str, str]) -> bool:
        for names, attribute in constraints:
            values = []
            for name in names & chosen.keys():
                attributes = devices[chosen[name]]["attributes"]
                key = attribute if attribute in attributes else attribute.removeprefix(DRIVER + "/")
                if key not in attributes:
                    return False
                values.append(attributes[key])
            if any(found != values[0] for found in values):
                return False
        return True

    def search(chosen: dict[str, str]) -> dict[str, str] | None:
        if len(chosen) == len(requests):
            return chosen
        name, kind = requests[len(chosen)]
        for device in sorted(devices):
            if value(devices[device], "type") == kind and device not in chosen.values():
                if fits(trial := {**chosen, name: device}) and (done := search(trial)) is not None:
                    return done
        return None

    return search({})


# -- the tests ------------------------------------------------------------------------------------

async def test_dgx_h100_gpus_and_nics_are_published_withdrawn_on_xid_79_and_back_after_a_reboot(short_dir):
    version = "v1.35.0"
    scenario = load_scenario("dgx-h100")
    async with rig(short_dir, "dgx-h100", version) as r:
        names = {f"gpu-{gpu.index}" for gpu in scenario.gpus} | {f"nic-{nic.name.replace('_', '-')}" for nic in scenario.nics}
        await eventually(lambda: r.generation() and set(r.devices()) == names, "every GPU and NIC published", r)
        first = r.generation()
        assert first is not None
        assert_valid(r, version)
        node, topology = await r.view.get_node(), await r.view.get_topology()
        devices = r.devices()
        places = {place.ref.index: place for place in topology.devices}
        for gpu in node.devices:
            device = devices[f"gpu-{gpu.ref.index}"]
            assert_gpu_attributes(device, gpu, places[gpu.ref.index])
            assert value(device, "type") == "gpu" and value(device, "mode") == "tdm"
            assert value(device, "nvlinkDomain") == 0  # one NVSwitch fabric: every GPU in GPU 0's domain
            assert device["allowMultipleAllocations"] is True and set(device["capacity"]) == {"compute", "memory"}
        assert [gpu.ref.pci_address for gpu in node.devices] == [gpu.pci_bus_id.lower()[4:] for gpu in scenario.gpus]
        for nic in topology.nics:
            assert_nic_attributes(devices[f"nic-{nic.name.replace('_', '-')}"], nic)

        roots = {name: value(device, STANDARD + "pcieRoot") for name, device in devices.items()}
        for gpu in scenario.gpus:  # each GPU and its own NIC on one PCIe root, no other GPU there
            (own,) = gpu.nics
            assert roots[f"nic-{own.replace('_', '-')}"] == roots[f"gpu-{gpu.index}"]
            assert [name for name, root in roots.items() if root == roots[f"gpu-{gpu.index}"] and name.startswith("gpu-")] == [
                f"gpu-{gpu.index}"]
        (template,) = [doc for doc in yaml.safe_load_all((EXAMPLES / "gpus-with-nics.yaml").read_text())
                       if doc["kind"] == "ResourceClaimTemplate"]
        allocation = allocate(template["spec"]["spec"], devices)
        assert allocation is not None, "the four-GPUs-four-NICs example cannot be allocated from the published pool"
        for n in range(4):
            assert roots[allocation[f"gpu-{n}"]] == roots[allocation[f"nic-{n}"]]

        await asyncio.to_thread(inject_remote, r.agent.url, XID_GPU, "xid", {"xid": 79})
        withdrawn = await eventually(lambda: f"gpu-{XID_GPU}" not in r.devices() and r.generation(),
                                     f"GPU {XID_GPU} withdrawn after XID 79", r)
        assert withdrawn > first
        assert set(r.devices()) == names - {f"gpu-{XID_GPU}"}  # its NIC and the other GPUs stay
        assert_valid(r, version)
        lost = (await r.view.get_node()).devices[XID_GPU]
        assert lost.lost or lost.health.state == node_pb2.HEALTH_STATE_UNHEALTHY

        await asyncio.to_thread(reboot_remote, r.agent.url)  # a new boot id: the fault and the sticky verdict clear
        back = await eventually(lambda: f"gpu-{XID_GPU}" in r.devices() and r.generation(),
                                f"GPU {XID_GPU} published again after the reboot", r)
        assert back > withdrawn and set(r.devices()) == names
        assert_valid(r, version)
        node, topology = await r.view.get_node(), await r.view.get_topology()
        assert_gpu_attributes(r.devices()[f"gpu-{XID_GPU}"], node.devices[XID_GPU],
                              {place.ref.index: place for place in topology.devices}[XID_GPU])
        assert_role_allows(r.api.requests)
        assert_policy_admits(r.api.slices)


@pytest.mark.parametrize("version", ["v1.34.0", "v1.35.0"])
async def test_dgx_a100_mig_gpus_publish_every_placement_with_counters(short_dir, version):
    async with rig(short_dir, "dgx-a100", version) as r:
        await eventually(lambda: r.generation() and {"gpu-0-mig-7g80gb-0-0", "gpu-1-mig-7g80gb-0-0", "gpu-7"} <= set(r.devices()),
                         "the MIG placements and the whole GPUs published", r)
        assert_valid(r, version)
        node, topology = await r.view.get_node(), await r.view.get_topology()
        places = {place.ref.index: place for place in topology.devices}
        devices = r.devices()
        counter_sets = {counter_set["name"]: (item, counter_set) for item in r.pool()
                        for counter_set in item["spec"].get("sharedCounters") or []}
        assert set(counter_sets) == {"gpu-0-counter-set", "gpu-1-counter-set"}
        for gpu in node.devices:
            index = gpu.ref.index
            if gpu.mode != "mig":
                assert index >= 2 and value(devices[f"gpu-{index}"], "mode") == "tdm"
                assert_gpu_attributes(devices[f"gpu-{index}"], gpu, places[index])
                continue
            assert index in (0, 1) and f"gpu-{index}" not in devices  # no whole device while in MIG mode
            item, counter_set = counter_sets[f"gpu-{index}-counter-set"]
            assert counter_set["counters"] == {f"memory-slice-{i}": {"value": "1"} for i in range(gpu.partition_memory_slices)}
            assert gpu.partition_memory_slices == 8 and len(gpu.partition_profiles) == 7
            wanted = {}
            for profile in gpu.partition_profiles:
                compact = re.sub(r"[^a-z0-9]", "", profile.name)
                for start in profile.placements:
                    wanted[f"gpu-{index}-mig-{compact}-{profile.profile_id}-{start}"] = (profile, start)
            mine = {name: device for name, device in devices.items() if name.startswith(f"gpu-{index}-mig-")}
            assert set(mine) == set(wanted) and len(mine) == 25  # A100 80GB: 7+7+4+3+2+1+1 placements
            for name, (profile, start) in wanted.items():
                device = mine[name]
                assert {a: value(device, a) for a in ("type", "profile", "parentUUID", "parentIndex")} == {
                    "type": "mig", "profile": profile.name, "parentUUID": gpu.ref.uuid, "parentIndex": index}
                wanted_place = {"productName": gpu.model, STANDARD + "pciBusID": gpu.ref.pci_address, **place_attributes(places[index])}
                assert {a: value(device, a) for a in wanted_place} == wanted_place, name
                assert device["consumesCounters"] == [{"counterSet": f"gpu-{index}-counter-set", "counters": {
                    f"memory-slice-{i}": {"value": "1"} for i in range(start, start + profile.memory_slices)}}]
                assert device["capacity"]["computeSlices"] == {"value": str(profile.compute_slices)}
            if version == "v1.35.0":  # counters in a slice of their own
                assert "devices" not in item["spec"]
            else:  # counters beside their GPU's devices
                assert {device["name"] for device in item["spec"]["devices"]} == set(wanted)
        assert_policy_admits(r.api.slices)
