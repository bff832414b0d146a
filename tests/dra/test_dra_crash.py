"""The DRA driver's process (``python -m runtimekit.kube.dra serve``, the main of ``runtimekit dra
serve``) killed (SIGKILL, ``RUNTIMEKIT_FAILPOINTS``) at every step of prepare and of unprepare,
started again without the failpoint, and retried by the fake kubelet, converges: one agent slice
per device that takes one after prepare (the TDM share and the MIG placement; a retry adopts what
the killed driver made), none after unprepare, the checkpoint saying so, the NIC's CDI spec there
and then gone. And the agent itself killed between two steps of the driver
(its journal keeps the slice made so far): the retry adopts that slice.

The driver runs as its own process against a real agent on the simulated DGX A100 (one for the
module) and the fake API server (tests/kube_fake_resource.py: it serves the claim and takes the
ResourceSlices the driver publishes); the kubelet is kubelet_fake.FakeDraKubelet.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runtimekit._proto.runtimekit.v1 import slice_pb2
from runtimekit.kube.dra.checkpoint import COMPLETED, STARTED
from runtimekit.kube.dra.claims import ClaimRef
from runtimekit.kube.dra.names import owner_id, parse_owner_id
from tests.dra.dra_claims import DRIVER, NODE, Alloc, Config, ref_of, resource_claim, slice_config
from tests.dra.dra_process import DriverProcess
from tests.dra.dra_rig import NodeAgent, agent_slices, claim_slices, drop_dra_slices, short_directory
from tests.dra.kubelet_fake import CallFailed, FakeDraKubelet
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import serve

PREPARE_STEPS = ["dra.prepare.started", "dra.prepare.slice_created", "dra.prepare.slice_recorded",
                 "dra.prepare.cdi_written", "dra.prepare.completed"]
UNPREPARE_STEPS = ["dra.unprepare.slice_deleted", "dra.unprepare.cdi_removed", "dra.unprepare.dropped"]
SLICED = (0, 1)  # the positions of the claim's devices that take an agent slice


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
async def driver(node: NodeAgent) -> AsyncIterator[tuple[DriverProcess, FakeResourceApi]]:
    api = FakeResourceApi(nodes=(NODE,))
    runner, url = await serve(api.app)
    with short_directory("rk-drv-") as directory:
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(api.kubeconfig(url))
        process = DriverProcess(directory, node, kubeconfig)
        try:
            yield process, api
        finally:
            process.kill()
            await runner.cleanup()
            if node.agent is None:
                node.start()
            await drop_dra_slices(node.socket)


def the_claim(api: FakeResourceApi) -> ClaimRef:
    """A TDM share (position 0), a MIG placement (1) and a NIC (2): every kind of side effect."""
    return ref_of(api.add_claim(resource_claim("crash", [
        Alloc("share", "gpu-2", "tdm", consumed={"compute": "50", "memory": "2Gi"}),
        Alloc("mig", "gpu-0-mig-1g10gb-19-0", "mig"),
        Alloc("nic", "nic-mlx5-0", "nic"),
    ], configs=[Config(slice_config(compute=50, memory="2GiB"), ("share",))])))


def nic_spec(node: NodeAgent, ref: ClaimRef) -> Path:
    return node.cdi_dir / f"runtimekit.io-claim_{ref.uid}.json"


async def registered(driver: DriverProcess) -> FakeDraKubelet:
    kubelet = FakeDraKubelet(driver.registry_dir, DRIVER)
    try:
        await kubelet.register()
    except TimeoutError:
        raise AssertionError(f"the driver did not register:\n{driver.log()}") from None
    return kubelet


async def assert_prepared(driver: DriverProcess, kubelet: FakeDraKubelet, ref: ClaimRef) -> list[slice_pb2.Slice]:
    """Prepare (the kubelet's retry) answers every device, and the node holds exactly what it says."""
    answer = (await kubelet.prepare([ref]))[ref.uid]
    assert answer.error == "", f"{answer.error}\n{driver.log()}"
    slices = await agent_slices(driver.agent.socket)
    made = claim_slices(slices, ref.uid)
    assert sorted(o.position for s in made if (o := parse_owner_id(s.owner.owner_id))) == list(SLICED), made
    assert all(s.state == slice_pb2.SLICE_STATE_READY for s in made)
    assert [s for s in slices if parse_owner_id(s.owner.owner_id) and s not in made] == []  # no stray slice
    assert [d.cdi_ids for d in answer.devices] == [(made[0].cdi_device,), (made[1].cdi_device,),
                                                   (f"runtimekit.io/claim={ref.uid}-nic-mlx5-0",)]
    entry = driver.checkpoint().claims[ref.uid]
    assert entry.state == COMPLETED
    assert [d.slice_id for d in entry.devices] == [made[0].id, made[1].id, ""]
    assert nic_spec(driver.agent, ref).exists()
    return made


async def assert_unprepared(driver: DriverProcess, kubelet: FakeDraKubelet, ref: ClaimRef) -> None:
    assert await kubelet.unprepare([ref]) == {ref.uid: ""}, driver.log()
    assert claim_slices(await agent_slices(driver.agent.socket), ref.uid) == []
    assert ref.uid not in driver.checkpoint().claims
    assert not nic_spec(driver.agent, ref).exists()
    assert [p.name for p in driver.agent.cdi_dir.iterdir() if "slice" in p.name] == []  # the agent removed its specs


@pytest.mark.parametrize("failpoint", PREPARE_STEPS)
async def test_a_driver_killed_while_preparing_converges_on_the_kubelets_retry(
        driver: tuple[DriverProcess, FakeResourceApi], failpoint: str) -> None:
    process, api = driver
    ref = the_claim(api)
    process.start(failpoints=failpoint)
    kubelet = await registered(process)
    with pytest.raises(CallFailed):  # the driver died under the call
        await kubelet.prepare([ref])
    await process.wait_killed()
    assert process.checkpoint().claims[ref.uid].state == (COMPLETED if failpoint == "dra.prepare.completed" else STARTED)

    process.start()
    kubelet = await registered(process)
    await assert_prepared(process, kubelet, ref)
    await assert_unprepared(process, kubelet, ref)


@pytest.mark.parametrize("failpoint", UNPREPARE_STEPS)
async def test_a_driver_killed_while_unpreparing_converges_on_the_kubelets_retry(
        driver: tuple[DriverProcess, FakeResourceApi], failpoint: str) -> None:
    process, api = driver
    ref = the_claim(api)
    process.start(failpoints=failpoint)
    kubelet = await registered(process)
    await assert_prepared(process, kubelet, ref)
    with pytest.raises(CallFailed):
        await kubelet.unprepare([ref])
    await process.wait_killed()

    process.start()
    kubelet = await registered(process)
    await assert_unprepared(process, kubelet, ref)


async def test_the_agent_killed_between_the_drivers_steps_keeps_the_slice_the_retry_adopts(
        driver: tuple[DriverProcess, FakeResourceApi]) -> None:
    process, api = driver
    ref = the_claim(api)
    process.start(failpoints="dra.prepare.slice_recorded")  # the TDM share made and recorded, nothing else
    kubelet = await registered(process)
    with pytest.raises(CallFailed):
        await kubelet.prepare([ref])
    await process.wait_killed()
    [share] = claim_slices(await agent_slices(process.agent.socket), ref.uid)
    assert share.owner.owner_id == owner_id(ref.uid, 0, DRIVER, process.checkpoint().id)
    assert process.checkpoint().claims[ref.uid].devices[0].slice_id == share.id

    process.agent.kill()  # the agent dies too; its journal keeps the share
    process.agent.start()
    process.start()
    kubelet = await registered(process)
    made = await assert_prepared(process, kubelet, ref)
    assert made[0].id == share.id  # adopted, not made again
    await assert_unprepared(process, kubelet, ref)
    await process.stop()
