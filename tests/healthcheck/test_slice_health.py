"""Health per slice: fault isolation (an instance's XID holds its slice, not the card or the other
slices; card-wide faults still hold the card) and isolation measured (memory over quota, compute
over share), through the real checker, detectors and fault policy."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from exporter_factories import TRAINER, make_attribution, make_pod_usage
from health_factories import GiB, MiB, make_gpu, make_snapshot, uuid_for, xid

from runtimekit.gpu.types import GpuProcess, Modes, NodeSnapshot
from runtimekit.healthcheck.api import HEALTH_PATH, add_health_routes
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.healthcheck.detectors import run_detectors
from runtimekit.healthcheck.machine import MachineInput, MachineState, step
from runtimekit.healthcheck.policy import PolicyError, parse_policy
from runtimekit.healthcheck.statefile import decode, encode
from runtimekit.healthcheck.thresholds import defaults
from runtimekit.healthcheck.types import HEALTHY, INSTANCE, RECOVERING, SUSPECT, UNHEALTHY, DetectorInput, NodeHealth
from runtimekit.state import NodeState, SamplerStats
from runtimekit.state.refs import GpuRef, MigRef
from runtimekit.state.slices import Owner, Slice, SliceSpec, SliceTable

T0 = 1_700_000_000.0
STEP = 10.0
WINDOW = defaults()["slices"]["compute_over_share_seconds"]


def mig_gpu(index: int = 0, *, at: float = T0, processes: tuple[GpuProcess, ...] = ()) -> Any:
    modes = Modes(compute_mode="default", persistence_mode=True, mig_mode_current=True, mig_mode_pending=False)
    return make_gpu(index, at=at, modes=modes, processes=processes)


def in_instance(pid: int, gi: int, memory: int) -> GpuProcess:
    return GpuProcess(pid=pid, used_memory_bytes=memory, kind="compute", gpu_instance_id=gi, compute_instance_id=0)


def mig_slice(slice_id: str, gi: int, *, gpu: int = 0, memory_mib: int = 10240, compute: int = 42) -> Slice:
    ref = GpuRef(uuid_for(gpu), gpu)
    return Slice(id=slice_id, spec=SliceSpec(mode="mig", compute=30, memory_mib=memory_mib, owner=Owner(owner_id="t")),
                 gpu=ref, state="ready", created_at=T0 - 100, compute=compute, memory_mib=memory_mib,
                 mig=MigRef(ref, gi, 0, f"MIG-{slice_id}"), profile="3g.40gb", profile_id=9)


def tdm_slice(slice_id: str, *, gpu: int = 1, compute: int = 50, memory_mib: int = 2048) -> Slice:
    owner = Owner(pod_uid=TRAINER.pod_uid, container=TRAINER.container)
    return Slice(id=slice_id, spec=SliceSpec(mode="tdm", compute=compute, memory_mib=memory_mib, owner=owner),
                 gpu=GpuRef(uuid_for(gpu), gpu), state="ready", created_at=T0 - 100, compute=compute,
                 memory_mib=memory_mib)


def table(*slices: Slice) -> SliceTable:
    return SliceTable(slices=MappingProxyType({s.id: s for s in slices}))


class Node:
    """A NodeState, the real checker over it, and a clock the test moves."""

    def __init__(self, *slices: Slice) -> None:
        self.now = T0
        self.state = NodeState()
        self.state.publish_slices(table(*slices))
        self.checker = HealthChecker(self.state, run_detectors, thresholds=defaults(), clean_samples=3,
                                     expected_gpus=2, clock=lambda: self.now)

    async def sample(self, snapshot: NodeSnapshot, *, attribution: Any = None) -> NodeHealth:
        self.now = snapshot.sampled_at
        if attribution is not None:
            self.state.publish_attribution(attribution)
        self.state.publish_snapshot(snapshot, SamplerStats())
        assert await self.checker.evaluate()
        health = self.state.view().health
        assert health is not None
        return health

    async def xid(self, code: int, gi: int | None, *, gpu: int = 0) -> NodeHealth:
        self.state.record_xid(xid(code, gpu=gpu, at=self.now, gpu_instance_id=gi, compute_instance_id=0))
        assert await self.checker.evaluate()
        health = self.state.view().health
        assert health is not None
        return health


def by_id(health: NodeHealth) -> dict[str, Any]:
    return {s.id: s for s in health.slices}


def gpu(health: NodeHealth, index: int) -> Any:
    return next(g for g in health.gpus if g.index == index)


async def test_an_instance_xid_makes_its_slice_unhealthy_and_leaves_the_card_and_the_other_slice_healthy():
    node = Node(mig_slice("s-a", 1), mig_slice("s-b", 2))
    await node.sample(make_snapshot(mig_gpu(0), make_gpu(1)))
    health = await node.xid(109, gi=1)  # context-switch timeout in GPU instance 1: scope instance

    a, b = by_id(health)["s-a"], by_id(health)["s-b"]
    assert (a.state, a.gpu_instance_id, [(f.fault, f.gpu_instance_id) for f in a.faults]) == (UNHEALTHY, 1, [("xid_109", 1)])
    assert a.action == "drain_and_reset_gpu"
    assert (b.state, b.faults) == (HEALTHY, ())
    card = gpu(health, 0)
    assert (card.state, card.schedulable, card.action, card.faults) == (HEALTHY, True, "none", ())
    assert [f.fault for f in card.instance_faults] == ["xid_109"]
    assert health.state == HEALTHY  # the node is its cards' and its own: a slice never sets it


@pytest.mark.parametrize("code", [48, 74, 79])  # double-bit ECC, NVLink, fallen off the bus
async def test_a_card_wide_xid_naming_an_instance_still_holds_the_card_and_every_slice_on_it(code):
    node = Node(mig_slice("s-a", 1), mig_slice("s-b", 2))
    await node.sample(make_snapshot(mig_gpu(0), make_gpu(1)))
    health = await node.xid(code, gi=1)

    card = gpu(health, 0)
    assert (card.state, card.schedulable, card.instance_faults) == (UNHEALTHY, False, ())
    assert card.faults and all(f.scope == "card" for f in card.faults)
    assert [(s.state, s.faults) for s in health.slices] == [(UNHEALTHY, ()), (UNHEALTHY, ())]  # no better than the card
    assert gpu(health, 1).state == HEALTHY


async def test_an_application_fault_in_an_instance_makes_its_slice_unhealthy_and_leaves_the_card():
    """XID 13 is one process's bug: info for a card, but in a MIG instance it is the slice's workload
    failing (the policy's slice_severity)."""
    node = Node(mig_slice("s-a", 1), mig_slice("s-b", 2))
    await node.sample(make_snapshot(mig_gpu(0), make_gpu(1)))
    health = await node.xid(13, gi=1)
    a, b = by_id(health)["s-a"], by_id(health)["s-b"]
    assert (a.state, [f.fault for f in a.faults], a.action) == (UNHEALTHY, ["xid_13"], "restart_application")
    assert b.state == HEALTHY
    assert gpu(health, 0).faults == () and gpu(health, 0).state == HEALTHY and gpu(health, 0).schedulable


async def test_a_preemptive_cleanup_xid_in_an_instance_changes_nothing():
    """XID 45 follows every killed CUDA process (Ctrl-C is no fault): recorded on the slice, nothing more."""
    node = Node(mig_slice("s-a", 1))
    await node.sample(make_snapshot(mig_gpu(0), make_gpu(1)))
    health = await node.xid(45, gi=1)
    assert by_id(health)["s-a"].state == HEALTHY


async def test_an_instance_fault_from_before_the_slice_existed_is_not_the_slices():
    """GPU instance ids are reused: a new slice on instance 1 does not inherit an old instance 1 fault."""
    node = Node(mig_slice("s-a", 1))
    await node.sample(make_snapshot(mig_gpu(0), make_gpu(1)))
    await node.xid(109, gi=1)
    node.state.publish_slices(table(dataclasses.replace(mig_slice("s-new", 1), created_at=node.now + 1)))
    health = await node.sample(make_snapshot(mig_gpu(0, at=T0 + STEP), make_gpu(1, at=T0 + STEP)))
    assert (by_id(health)["s-new"].state, by_id(health)["s-new"].faults) == (HEALTHY, ())
    assert [f.fault for f in gpu(health, 0).instance_faults] == ["xid_109"]  # held by the card's record, by its rule


def test_an_instance_fault_is_read_back_as_one_after_a_restart():
    snapshot = make_snapshot(mig_gpu(0), make_gpu(1))
    _, findings = run_detectors({}, DetectorInput(now=T0, snapshot=snapshot, previous=snapshot, expected_gpus=2,
                                                  config=defaults(), xids=(xid(109, at=T0, gpu_instance_id=3),)))
    state = step(MachineState(), MachineInput(now=T0, findings=tuple(findings), gpus=((0, uuid_for(0)), (1, uuid_for(1))),
                                              sampled=False)).state
    restored, *_ = decode(encode(state, 2, "boot", saved_at=T0))
    (fault,) = restored.gpus[uuid_for(0)].faults
    assert (fault.scope, fault.gpu_instance_id, fault.instance_scoped) == (INSTANCE, 3, True)
    assert restored.gpus[uuid_for(0)].state == HEALTHY


async def test_memory_over_quota_fires_at_once_and_clears_once_back_under():
    node = Node(tdm_slice("s-t"))
    over = make_attribution(pods=(make_pod_usage(1, used_memory_bytes=3 * GiB, sm_utilization=0.1),))
    health = await node.sample(make_snapshot(make_gpu(0), make_gpu(1)), attribution=over)
    t = by_id(health)["s-t"]
    assert (t.state, [f.fault for f in t.faults], t.memory_used_bytes) == (SUSPECT, ["slice_memory_over_quota"], 3 * GiB)
    assert "3072 MiB" in t.faults[0].evidence and "2048 MiB" in t.faults[0].evidence
    assert gpu(health, 1).state == HEALTHY and gpu(health, 1).faults == ()

    under = make_attribution(pods=(make_pod_usage(1, used_memory_bytes=1 * GiB, sm_utilization=0.1),))
    seen = []
    for n in range(1, 4):
        at = T0 + n * STEP
        health = await node.sample(make_snapshot(make_gpu(0, at=at), make_gpu(1, at=at)), attribution=under)
        seen.append(by_id(health)["s-t"].state)
    assert seen == [RECOVERING, RECOVERING, HEALTHY]
    assert by_id(health)["s-t"].faults == ()


async def test_a_mig_slice_counts_only_the_processes_in_its_instance():
    node = Node(mig_slice("s-a", 1, memory_mib=1024), mig_slice("s-b", 2, memory_mib=1024))
    processes = (in_instance(10, 1, 700 * MiB), in_instance(11, 1, 500 * MiB), in_instance(12, 2, 900 * MiB))
    health = await node.sample(make_snapshot(mig_gpu(0, processes=processes), make_gpu(1)))
    a, b = by_id(health)["s-a"], by_id(health)["s-b"]
    assert (a.memory_used_bytes, [f.fault for f in a.faults]) == (1200 * MiB, ["slice_memory_over_quota"])
    assert (b.memory_used_bytes, b.faults, b.state) == (900 * MiB, (), HEALTHY)
    assert a.utilization is None  # NVML has no per-process SM time inside a MIG instance


@pytest.mark.parametrize("sm", [None, 0.4], ids=["idle", "a ratio in the row"])
async def test_a_mig_slice_never_has_an_sm_share_idle_or_busy(sm):
    """Idle (no process: nothing to sum) is not 0, and a ratio a row might carry is not summed either."""
    rows = () if sm is None else (dataclasses.replace(in_instance(10, 1, 100 * MiB), sm_utilization=sm),)
    node = Node(mig_slice("s-a", 1))
    a = by_id(await node.sample(make_snapshot(mig_gpu(0, processes=rows), make_gpu(1))))["s-a"]
    assert (a.memory_used_bytes, a.utilization) == (len(rows) * 100 * MiB, None)


async def test_compute_over_share_fires_only_after_the_window():
    node = Node(tdm_slice("s-t", compute=50), tdm_slice("s-free", compute=0))
    busy = make_attribution(pods=(make_pod_usage(1, used_memory_bytes=GiB, sm_utilization=0.8),))
    fired_at = None
    for n in range(int(WINDOW / STEP) + 2):
        at = T0 + n * STEP
        health = await node.sample(make_snapshot(make_gpu(0, at=at), make_gpu(1, at=at)), attribution=busy)
        faults = [f.fault for f in by_id(health)["s-t"].faults]
        if faults and fired_at is None:
            fired_at = at
        assert by_id(health)["s-free"].faults == ()  # compute 0: unlimited, never over its share
    assert fired_at == T0 + WINDOW
    t = by_id(health)["s-t"]
    assert ([f.fault for f in t.faults], t.state, t.utilization) == (["slice_compute_over_share"], SUSPECT, 0.8)
    assert gpu(health, 1).state == HEALTHY


async def test_a_share_that_drops_back_restarts_the_window():
    node = Node(tdm_slice("s-t", compute=50))
    for n in range(int(WINDOW / STEP) + 1):
        at = T0 + n * STEP
        sm = 0.2 if n == int(WINDOW / STEP) - 1 else 0.8  # one sample under, just before the window ends
        usage = make_attribution(pods=(make_pod_usage(1, used_memory_bytes=GiB, sm_utilization=sm),))
        health = await node.sample(make_snapshot(make_gpu(0, at=at), make_gpu(1, at=at)), attribution=usage)
        assert by_id(health)["s-t"].faults == ()


async def test_the_health_api_shows_slices_with_state_faults_and_use():
    node = Node(mig_slice("s-a", 1), mig_slice("s-b", 2))
    await node.sample(make_snapshot(mig_gpu(0, processes=(in_instance(10, 1, 300 * MiB),)), make_gpu(1)))
    await node.xid(109, gi=1)
    app = web.Application()
    add_health_routes(app, node.state)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        body = await (await client.get(HEALTH_PATH)).json()
    slices = {s["id"]: s for s in body["slices"]}
    assert (slices["s-a"]["state"], slices["s-a"]["gpu"], slices["s-a"]["gpu_instance_id"]) == (UNHEALTHY, 0, 1)
    assert [f["fault"] for f in slices["s-a"]["faults"]] == ["xid_109"]
    assert slices["s-a"]["memory_used_bytes"] == 300 * MiB and slices["s-a"]["utilization"] is None
    assert (slices["s-b"]["state"], slices["s-b"]["faults"]) == (HEALTHY, [])
    card = body["gpus"][0]
    assert (card["state"], card["schedulable"], card["faults"]) == (HEALTHY, True, [])
    assert [f["fault"] for f in card["instance_faults"]] == ["xid_109"]


BASE = {"detector": "driver", "severity": "warning", "action": "none", "class": "informational",
        "schedulable": True, "clears": "clean_samples"}


def policy_with(**faults: dict[str, Any]) -> dict[str, Any]:
    return {"faults": {"xid_repeated": BASE, **faults}, "default": {"meaning": "unknown", **_without(BASE, "detector")},
            "xids": {13: {"meaning": "app", **_without(BASE, "detector")}}}


def _without(entry: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != key}


@pytest.mark.parametrize("fault, message", [
    ({**BASE, "scope": "slice"}, "faults.f.scope: must be one of card, instance, got 'slice'"),
    ({**BASE, "detector": "thermal_power", "scope": "instance"}, "faults.f.scope: only an XID names a MIG instance"),
    ({**BASE, "detector": "slices"}, "faults.f.scope: a slice's fault is held by the slice"),
    ({**BASE, "detector": "slices", "scope": "card"}, "faults.f.scope: a slice's fault is held by the slice"),
    ({**BASE, "slice_severity": "critical"}, "faults.f.slice_severity: only a fault an instance holds (scope: instance)"),
    ({**BASE, "detector": "driver", "scope": "instance", "slice_severity": "fatal"},
     "faults.f.slice_severity: must be one of info, warning, critical, got 'fatal'"),
])
def test_the_policy_scope_is_validated_and_named(fault, message):
    with pytest.raises(PolicyError) as error:
        parse_policy(policy_with(f=fault))
    assert str(error.value).startswith(message)


def test_the_policy_defaults_to_card_and_scopes_the_instance_faults():
    policy = parse_policy(policy_with(f=BASE, g={**BASE, "scope": "instance"}))
    assert (policy.fault("f").scope, policy.fault("g").scope) == ("card", "instance")
