"""The DRA driver's node side (``DraService``, in this process) between the fake kubelet
(kubelet_fake.py: the real one cannot run here) and a REAL agent on the simulated DGX A100
(``runtimekit serve --sim dgx-a100``: GPUs 0 and 1 start in MIG mode, 2-7 in TDM mode, eight RDMA
NICs), all on real unix sockets. Claims come from a ClaimStore (dra_claims.py): allocated to this
driver as the scheduler allocates them, checked against the API server's schema.

One agent serves the whole module; each test starts its own driver (its own plugin directory and
checkpoint) and leaves the agent without slices.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runtimekit._proto.runtimekit.v1 import service_pb2, slice_pb2
from runtimekit.kube.agentclient import AgentClient
from runtimekit.kube.dra.checkpoint import COMPLETED, Checkpoint, ClaimEntry
from runtimekit.kube.dra.names import owner_id
from tests.dra.dra_claims import DRIVER, NODE, Alloc, ClaimStore, Config, resource_claim, slice_config
from tests.dra.dra_rig import NodeAgent, agent_slices, claim_slices, driver_config, drop_dra_slices, running_driver, short_directory

GIB = 1 << 30


@pytest.fixture(scope="module")
def node() -> Iterator[NodeAgent]:
    with short_directory() as directory:
        agent = NodeAgent(directory, "dgx-a100")
        agent.start()
        try:
            yield agent
        finally:
            agent.stop()


@pytest.fixture
async def agent(node: NodeAgent) -> AsyncIterator[NodeAgent]:
    """The module's agent, running; its slices and the driver's NIC specs removed after the test."""
    if node.agent is None:  # a test killed it
        node.start()
    yield node
    if node.agent is None:
        node.start()
    await drop_dra_slices(node.socket)
    for spec in node.cdi_dir.glob("runtimekit.io-claim_*.json"):
        spec.unlink()


@pytest.fixture
def driver_dir() -> Iterator[Path]:
    with short_directory("rk-drv-") as directory:
        yield directory


@pytest.fixture
def store() -> ClaimStore:
    return ClaimStore()


def tdm_share(name: str = "share", device: str = "gpu-2", **config: object) -> dict:
    return resource_claim(name, [Alloc("share", device, "tdm", consumed={"compute": "50", "memory": "2Gi"})],
                          configs=[Config(slice_config(**(config or {"compute": 50, "memory": "2GiB"})), ("share",))])


async def gpu_uuid(socket: str, index: int) -> str:
    async with AgentClient(socket, 10.0) as client:
        return next(d.ref.uuid for d in (await client.get_node()).devices if d.ref.index == index)


async def test_the_kubelet_registers_the_driver_and_its_verdict_is_recorded(agent: NodeAgent, driver_dir: Path,
                                                                            store: ClaimStore) -> None:
    config = driver_config(driver_dir, agent)
    async with running_driver(config, store) as driver:
        info = driver.kubelet.info
        assert info is not None
        assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
            "DRAPlugin", DRIVER, config.dra_socket, ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
        assert driver.kubelet.service == "v1.DRAPlugin"  # the newest both speak
        assert (driver.service.registration.registered, driver.service.registration.error) == (True, "")
        await driver.kubelet.notify(False, "plugin name clash")
        assert (driver.service.registration.registered, driver.service.registration.error) == (False, "plugin name clash")
        assert oct(os.stat(config.dra_socket).st_mode & 0o777) == "0o600"


async def test_a_tdm_share_is_made_once_and_the_kubelets_retry_gets_the_same_answer(agent: NodeAgent, driver_dir: Path,
                                                                                   store: ClaimStore) -> None:
    claim = tdm_share()
    ref = store.add(claim)
    share_id = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        first = (await driver.kubelet.prepare([ref]))[ref.uid]
        assert first.error == ""
        [made] = claim_slices(await agent_slices(agent.socket), ref.uid)
        assert (made.mode, made.device.index, made.requested_compute_percent, made.requested_memory_bytes, made.owner.owner_id,
                made.state) == ("tdm", 2, 50, 2 * GIB, owner_id(ref.uid, 0, DRIVER, driver.checkpoint().id),
                                slice_pb2.SLICE_STATE_READY)  # the owner names the driver and its checkpoint
        [device] = first.devices
        assert (device.request_names, device.pool, device.device, device.cdi_ids, device.share_id) == (
            ("share",), NODE, "gpu-2", (made.cdi_device,), share_id)
        assert [path.name for path in agent.cdi_dir.iterdir() if made.id in path.name] == [
            f"runtimekit_io-slice-{made.id}.json"]  # the agent's spec, with the limits

        reads = store.reads
        again = (await driver.kubelet.prepare([ref], service="v1beta1.DRAPlugin"))[ref.uid]  # a 1.33 kubelet retries
        assert [(d.device, d.cdi_ids, d.share_id) for d in again.devices] == [("gpu-2", (made.cdi_device,), None)]
        assert [s.id for s in claim_slices(await agent_slices(agent.socket), ref.uid)] == [made.id]  # no second slice
        assert store.reads == reads  # a completed claim is answered from the checkpoint
        assert driver.checkpoint().claims[ref.uid].state == COMPLETED


async def test_a_whole_gpu_is_handed_over_by_its_cdi_name_and_refused_while_a_foreign_slice_is_on_it(
        agent: NodeAgent, driver_dir: Path, store: ClaimStore) -> None:
    whole = store.add(resource_claim("whole", [Alloc("gpu", "gpu-3")]))
    taken = store.add(resource_claim("taken", [Alloc("gpu", "gpu-4")]))
    async with AgentClient(agent.socket, 10.0) as client:
        foreign = await client.create_slice(service_pb2.CreateSliceRequest(mode="tdm", device="4", memory="1GiB",
                                                                           owner_id="notebook"))
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        answers = await driver.kubelet.prepare([whole, taken])
        assert answers[whole.uid].error == ""
        assert [d.cdi_ids for d in answers[whole.uid].devices] == [(f"nvidia.com/gpu={await gpu_uuid(agent.socket, 3)}",)]
        assert claim_slices(await agent_slices(agent.socket), whole.uid) == []  # a whole GPU needs no slice
        assert f"the agent holds slices on it that are not this driver's: {foreign.id}" in answers[taken.uid].error
        assert answers[taken.uid].error.startswith(f"claim default/taken ({taken.uid}): request gpu, device gpu-4")
        assert taken.uid not in driver.checkpoint().claims


async def test_a_mig_placement_is_made_where_the_scheduler_put_it(agent: NodeAgent, driver_dir: Path, store: ClaimStore) -> None:
    ref = store.add(resource_claim("mig", [Alloc("mig/small", "gpu-0-mig-1g10gb-19-3", "mig")]))
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        answer = (await driver.kubelet.prepare([ref]))[ref.uid]
        assert answer.error == ""
        [made] = claim_slices(await agent_slices(agent.socket), ref.uid)
        assert (made.mode, made.device.index, made.profile, made.partition.placement_start, made.partition.profile_id) == (
            "mig", 0, "1g.10gb", 3, 19)
        assert [(d.request_names, d.device, d.cdi_ids) for d in answer.devices] == [
            (("mig",), "gpu-0-mig-1g10gb-19-3", (made.cdi_device,))]  # the base request, as the kubelet wants it


async def test_nics_get_the_claims_own_cdi_spec_and_unprepare_removes_everything(agent: NodeAgent, driver_dir: Path,
                                                                                 store: ClaimStore) -> None:
    ref = store.add(resource_claim("train", [Alloc("gpu", "gpu-5", "tdm", consumed={"compute": "30", "memory": "1Gi"}),
                                             Alloc("nic", "nic-mlx5-0", "nic"), Alloc("nic", "nic-mlx5-1", "nic")],
                                   class_configs=[Config(slice_config(), ("gpu",))]))
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        answer = (await driver.kubelet.prepare([ref]))[ref.uid]
        assert answer.error == ""
        [made] = claim_slices(await agent_slices(agent.socket), ref.uid)
        assert (made.requested_compute_percent, made.requested_memory_bytes) == (30, GIB)  # from consumedCapacity
        assert [d.cdi_ids for d in answer.devices] == [
            (made.cdi_device,), (f"runtimekit.io/claim={ref.uid}-nic-mlx5-0",), (f"runtimekit.io/claim={ref.uid}-nic-mlx5-1",)]
        spec_path = agent.cdi_dir / f"runtimekit.io-claim_{ref.uid}.json"
        spec = json.loads(spec_path.read_text())
        assert [[n["hostPath"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]] == [
            ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"], ["/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"]]
        agent_specs = [p for p in agent.cdi_dir.iterdir() if made.id in p.name]
        assert agent_specs

        assert await driver.kubelet.unprepare([ref]) == {ref.uid: ""}
        assert claim_slices(await agent_slices(agent.socket), ref.uid) == []
        assert not spec_path.exists() and not any(p.exists() for p in agent_specs)
        assert ref.uid not in driver.checkpoint().claims
        assert await driver.kubelet.unprepare([ref]) == {ref.uid: ""}  # again (a kubelet restarted): still a success
        store.remove(ref)
        unknown = resource_claim("never", [Alloc("gpu", "gpu-6")])
        assert await driver.kubelet.unprepare([store.add(unknown)]) == {unknown["metadata"]["uid"]: ""}


async def test_a_bad_slice_config_fails_the_claim_naming_the_field_and_makes_nothing(agent: NodeAgent, driver_dir: Path,
                                                                                    store: ClaimStore) -> None:
    bad = store.add(tdm_share("bad", compute=150, memory="2GiB"))
    good = store.add(tdm_share("good", device="gpu-6"))
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        answers = await driver.kubelet.prepare([bad, good])  # one pod, two claims: each answered on its own
        assert "status.allocation.devices.config[0] (FromClaim) opaque parameters.compute: must be between 1 and 100, got 150" \
            in answers[bad.uid].error
        assert answers[bad.uid].devices == ()
        assert answers[good.uid].error == ""
        slices = await agent_slices(agent.socket)
        assert claim_slices(slices, bad.uid) == [] and len(claim_slices(slices, good.uid)) == 1
        assert bad.uid not in driver.checkpoint().claims


async def test_with_the_agent_down_prepare_fails_clearly_then_recovers(agent: NodeAgent, driver_dir: Path,
                                                                       store: ClaimStore) -> None:
    ref = store.add(tdm_share())
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        agent.kill()  # its socket stays behind, refusing connections
        down = (await driver.kubelet.prepare([ref]))[ref.uid]
        assert down.error.startswith(f"claim default/share ({ref.uid}): runtimekit agent at unix:{agent.socket}: "), down.error
        assert "Traceback" not in down.error
        assert ref.uid not in driver.checkpoint().claims  # nothing started
        agent.start()
        for _ in range(30):  # the kubelet retries; gRPC may still be backing off its dial for a moment
            up = (await driver.kubelet.prepare([ref]))[ref.uid]
            if not up.error:
                break
            assert up.error.startswith(f"claim default/share ({ref.uid}): runtimekit agent"), up.error
            await asyncio.sleep(0.1)
        assert up.error == ""
        assert len(claim_slices(await agent_slices(agent.socket), ref.uid)) == 1


async def test_with_the_api_server_down_prepare_fails_clearly_then_recovers(agent: NodeAgent, driver_dir: Path,
                                                                            store: ClaimStore) -> None:
    ref = store.add(tdm_share())
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        store.down = True
        down = (await driver.kubelet.prepare([ref]))[ref.uid]
        assert down.error == f"{ref}: GET ResourceClaim default/share: ConnectionRefusedError: the API server is down"
        assert ref.uid not in driver.checkpoint().claims
        store.down = False
        assert (await driver.kubelet.prepare([ref]))[ref.uid].error == ""  # the kubelet's retry
        assert len(claim_slices(await agent_slices(agent.socket), ref.uid)) == 1


async def test_the_start_sweeps_its_own_slices_of_claims_the_checkpoint_does_not_know(agent: NodeAgent, driver_dir: Path,
                                                                                      store: ClaimStore) -> None:
    config = driver_config(driver_dir, agent)
    known, lost = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"
    checkpoint = Checkpoint.load(config.checkpoint_path)
    checkpoint.put(known, ClaimEntry("default", "known", COMPLETED))
    mine, lost_one = owner_id(known, 0, DRIVER, checkpoint.id), owner_id(lost, 0, DRIVER, checkpoint.id)
    kept = (mine, "notebook", f"dra:{lost}:1",  # the old form: it cannot say which driver made it
            owner_id(lost, 2, DRIVER, "0123456789abcdef"), owner_id(lost, 3, "gpu2.runtimekit.io", checkpoint.id))
    async with AgentClient(agent.socket, 10.0) as client:
        made = {}
        for owner, device in zip((lost_one, *kept), "234567", strict=True):
            request = service_pb2.CreateSliceRequest(mode="tdm", device=device, memory="1GiB", owner_id=owner)
            made[owner] = (await client.create_slice(request)).id
    store.add(resource_claim("known", [Alloc("gpu", "gpu-2")], uid=known))  # still there: not unprepared as gone
    async with running_driver(config, store):
        for _ in range(100):
            if made[lost_one] not in {s.id for s in await agent_slices(agent.socket)}:
                break
            await asyncio.sleep(0.05)
        assert {s.id for s in await agent_slices(agent.socket)} == {made[owner] for owner in kept}


async def test_removed_sockets_are_served_again_and_the_driver_registers_again(agent: NodeAgent, driver_dir: Path,
                                                                               store: ClaimStore) -> None:
    ref = store.add(tdm_share())
    config = driver_config(driver_dir, agent)
    async with running_driver(config, store) as driver:
        os.unlink(config.registration_socket)  # a kubelet that wiped its directories
        os.unlink(config.dra_socket)
        await driver.kubelet.register()  # waits for the socket to be back, as the plugin watcher does
        assert os.path.exists(config.dra_socket)
        assert (await driver.kubelet.prepare([ref]))[ref.uid].error == ""
        assert driver.service.registration.notifications == 2


@pytest.mark.parametrize("other_driver", [DRIVER, "gpu2.runtimekit.io"])
async def test_a_second_driver_on_the_same_agent_never_sweeps_the_first_drivers_slices(
        agent: NodeAgent, driver_dir: Path, store: ClaimStore, other_driver: str) -> None:
    share = store.add(tdm_share())
    mig = store.add(resource_claim("mig", [Alloc("mig", "gpu-0-mig-1g10gb-19-2", "mig")]))
    async with running_driver(driver_config(driver_dir, agent), store) as first:
        answers = await first.kubelet.prepare([share, mig])
        assert [answers[ref.uid].error for ref in (share, mig)] == ["", ""]
        made = {s.id for ref in (share, mig) for s in claim_slices(await agent_slices(agent.socket), ref.uid)}
        assert len(made) == 2
        with short_directory("rk-drv2-") as other_dir:  # another plugin directory: an empty checkpoint
            second = driver_config(other_dir, agent, driver_name=other_driver, node_name="node-b")
            async with running_driver(second, ClaimStore()) as late:
                assert late.service.preparer is not None
                assert await late.service.preparer.sweep() == 0  # as at its start, and in every cleanup round
        assert made <= {s.id for s in await agent_slices(agent.socket)}
        assert await first.kubelet.unprepare([share, mig]) == {share.uid: "", mig.uid: ""}
        assert claim_slices(await agent_slices(agent.socket), share.uid) == []


async def test_a_nic_prepared_for_one_claim_is_refused_to_another(agent: NodeAgent, driver_dir: Path,
                                                                  store: ClaimStore) -> None:
    first = store.add(resource_claim("c6", [Alloc("nic", "nic-mlx5-0", "nic")]))
    second = store.add(resource_claim("c9", [Alloc("nic", "nic-mlx5-0", "nic")]))
    watcher = store.add(resource_claim("watch", [Alloc("nic", "nic-mlx5-0", "nic", admin_access=True)]))
    async with running_driver(driver_config(driver_dir, agent), store) as driver:
        assert (await driver.kubelet.prepare([first]))[first.uid].error == ""
        refused = (await driver.kubelet.prepare([second]))[second.uid].error
        assert refused == (f"{second}: request nic, device nic-mlx5-0: NIC mlx5_0 is prepared for claim default/c6 "
                           f"({first.uid}) (allocated twice?)"), refused
        assert not (agent.cdi_dir / f"runtimekit.io-claim_{second.uid}.json").exists()
        assert second.uid not in driver.checkpoint().claims
        assert (await driver.kubelet.prepare([watcher]))[watcher.uid].error == ""  # adminAccess shares the device
        assert await driver.kubelet.unprepare([first]) == {first.uid: ""}
        assert (await driver.kubelet.prepare([second]))[second.uid].error == ""  # free again
