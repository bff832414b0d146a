"""MIG in the simulator, driven through pynvml as a user (or the slicer) drives a real driver."""

import copy
import ctypes

import pynvml as N
import pytest

from runtimekit.sim import FaultError, ScenarioError, SimulatedNode, install, load_scenario, uninstall
from runtimekit.sim.mig_profiles import GEOMETRIES, gi_conflict, pick_gi_start
from runtimekit.sim.scenario import parse_scenario

MiB = 1 << 20
NO_ID = 0xFFFFFFFF
SCENARIOS = ("dgx-a100", "dgx-h100", "hgx-h200")

# The placement table (slicing.md §3): NVML enum -> (real id, compute slices, memory slices, starts).
TABLE = {
    N.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (19, 1, 1, [0, 1, 2, 3, 4, 5, 6]),
    N.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (20, 1, 1, [0, 1, 2, 3, 4, 5, 6]),
    N.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (15, 1, 2, [0, 2, 4, 6]),
    N.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (14, 2, 2, [0, 2, 4]),
    N.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (9, 3, 4, [0, 4]),
    N.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (5, 4, 4, [0]),
    N.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (0, 7, 8, [0]),
}
NAMES = {
    "dgx-a100": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "dgx-h100": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "hgx-h200": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}
MEMORY_MIB = {
    "dgx-a100": (9856, 9856, 19968, 19968, 40192, 40192, 80384),
    "dgx-h100": (9984, 9984, 20096, 20096, 40448, 40448, 81152),
    "hgx-h200": (16384, 16384, 33024, 33024, 71168, 71168, 143104),
}


@pytest.fixture
def sim(clock):
    """Install a node of a scenario (or a parsed Scenario); yields it. Uninstalls afterwards."""

    def make(scenario="dgx-h100", **kw):
        spec = load_scenario(scenario) if isinstance(scenario, str) else scenario
        node = SimulatedNode(spec, seed=3, clock=clock, load="busy", **kw)
        install(node)
        N.nvmlInit()
        return node

    yield make
    uninstall()


def mig_on(node, gpu=0):
    """Enable MIG on ``gpu`` and reset it; returns its handle."""
    h = N.nvmlDeviceGetHandleByIndex(gpu)
    N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
    node.reset_gpu(gpu)
    return h


def profile_id(h, enum):
    return N.nvmlDeviceGetGpuInstanceProfileInfo(h, enum).id


def placement(start, size):
    p = N.c_nvmlGpuInstancePlacement_t()
    p.start, p.size = start, size
    return p


def gi_placements(h, pid):
    count = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, None, ctypes.byref(count))
    array = (N.c_nvmlGpuInstancePlacement_t * count.value)()
    N.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, array, ctypes.byref(count))
    return [(p.start, p.size) for p in array[: count.value]]


def create(h, enum, start=None):
    pid = profile_id(h, enum)
    if start is None:
        return N.nvmlDeviceCreateGpuInstance(h, pid)
    return N.nvmlDeviceCreateGpuInstanceWithPlacement(h, pid, placement(start, TABLE[enum][2]))


def full_ci(gi):
    """A compute instance taking the whole GPU instance (nvidia-smi mig -cgi … -C)."""
    size = N.nvmlGpuInstanceGetInfo(gi).profileId
    enum = {19: 0, 20: 0, 15: 0, 14: 1, 9: 2, 5: 3, 0: 4}[size]
    return N.nvmlGpuInstanceCreateComputeInstance(gi, N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0).id)


def test_enabling_mig_stays_pending_until_the_gpu_is_reset(sim, clock):
    node = sim()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetMigMode(h) == [0, 0]
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE) == N.NVML_ERROR_RESET_REQUIRED
    assert N.nvmlDeviceGetMigMode(h) == [0, 1]
    with pytest.raises(N.NVMLError_NotSupported):  # not in MIG mode yet
        N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    N.nvmlDeviceGetTotalEnergyConsumption(h)  # time 0 is the node's first clock reading
    clock.advance(30)
    energy = N.nvmlDeviceGetTotalEnergyConsumption(h)
    assert energy > 0
    node.reset_gpu(0)
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]
    assert N.nvmlDeviceGetTotalEnergyConsumption(h) < energy  # a reset restarts the volatile counters
    assert N.nvmlDeviceGetMigMode(N.nvmlDeviceGetHandleByIndex(1)) == [0, 0]
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE) == N.NVML_SUCCESS  # already in effect


def test_a_reboot_applies_the_pending_mode_and_instances_do_not_survive_a_reset(sim):
    node = sim()
    h = N.nvmlDeviceGetHandleByIndex(2)
    N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
    node.reboot()
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]
    create(h, N.NVML_GPU_INSTANCE_PROFILE_7_SLICE)
    with pytest.raises(N.NVMLError_InUse):  # disabling with instances present
        N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_DISABLE)
    node.reset_gpu(2)
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0) == 1  # the 7g is gone
    assert N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_DISABLE) == N.NVML_ERROR_RESET_REQUIRED
    node.reset_gpu(2)
    assert N.nvmlDeviceGetMigMode(h) == [0, 0]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_seven_1g_instances_fill_the_card_and_an_eighth_is_refused(sim, scenario):
    h = mig_on(sim(scenario))
    pid = profile_id(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, pid) == 7
    for _ in range(7):
        N.nvmlDeviceCreateGpuInstance(h, pid)
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, pid) == 0
    with pytest.raises(N.NVMLError_InsufficientResources):
        N.nvmlDeviceCreateGpuInstance(h, pid)
    gis = (N.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint()
    N.nvmlDeviceGetGpuInstances(h, pid, gis, ctypes.byref(count))
    starts = sorted(N.nvmlGpuInstanceGetInfo(gis[i]).placement.start for i in range(count.value))
    assert starts == [0, 1, 2, 3, 4, 5, 6]  # memory slice 7 is stranded


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_profiles_and_placements_are_the_documented_ones(sim, scenario):
    h = mig_on(sim(scenario))
    for i, (enum, (pid, compute, memory, starts)) in enumerate(TABLE.items()):
        info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
        assert (info.id, info.sliceCount, info.memorySizeMB) == (pid, compute, MEMORY_MIB[scenario][i])
        assert info.name == NAMES[scenario][i]
        assert N.nvmlDeviceGetGpuInstanceProfileInfo(h, enum, version=1).id == pid
        assert gi_placements(h, pid) == [(s, memory) for s in starts]
    with pytest.raises(N.NVMLError_NotSupported):  # a profile of another part (8_SLICE)
        N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_8_SLICE)
    with pytest.raises(N.NVMLError_InvalidArgument):  # past the enum: iteration ends here
        N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_COUNT)


def test_placements_refuse_overlaps_and_bad_arguments(sim):
    h = mig_on(sim("dgx-a100"))
    with pytest.raises(N.NVMLError_InvalidArgument):  # a 3g may start at 0 or 4 only
        create(h, N.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 2)
    with pytest.raises(N.NVMLError_InvalidArgument):  # no such profile id
        N.nvmlDeviceCreateGpuInstance(h, 99)
    with pytest.raises(N.NVMLError_InvalidArgument):  # size must be the profile's
        N.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, placement(4, 3))
    create(h, N.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 4)
    create(h, N.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 0)  # 4g + 3g: the two-tenant full fit
    for enum in (N.NVML_GPU_INSTANCE_PROFILE_1_SLICE, N.NVML_GPU_INSTANCE_PROFILE_2_SLICE):
        assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, profile_id(h, enum)) == 0
        with pytest.raises(N.NVMLError_InsufficientResources):
            create(h, enum)
    with pytest.raises(N.NVMLError_InsufficientResources):  # overlaps the 4g
        create(h, N.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 2)


def test_without_a_placement_the_documented_ordering_quirk_holds(sim):
    """MIG User Guide: "-cgi 19,19,14,9 fails with Insufficient Resources while -cgi 9,19,14,19 works"."""
    node = sim("dgx-a100")
    h = mig_on(node, 0)
    for pid in (19, 19, 14):
        N.nvmlDeviceCreateGpuInstance(h, pid)
    with pytest.raises(N.NVMLError_InsufficientResources):
        N.nvmlDeviceCreateGpuInstance(h, 9)
    h1 = mig_on(node, 1)
    for pid in (9, 19, 14, 19):
        N.nvmlDeviceCreateGpuInstance(h1, pid)


def test_zero_waste_fits_and_two_4g_never_fit():
    g = GEOMETRIES["h100-80gb"]
    for names in (["7g.80gb"], ["4g.40gb", "3g.40gb"], ["3g.40gb", "2g.20gb", "2g.20gb"],
                  ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]):
        taken = []
        for name in names:
            p = g.by_name(name)
            start = pick_gi_start(taken, p)
            assert start is not None, names
            taken.append((p, start))
    four = g.by_name("4g.40gb")
    assert gi_conflict([(four, 0)], four, 0)[0] == "insufficient"


def test_compute_instances_and_destroying_an_instance_in_use(sim):
    node = sim()
    h = mig_on(node)
    gi = create(h, N.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert N.nvmlGpuInstanceGetInfo(gi).placement.start == 4  # the highest free start
    one = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0)
    assert (one.id, one.sliceCount, one.instanceCount, one.multiprocessorCount, one.name) == (0, 1, 3, 20, "1c.3g.40gb")
    with pytest.raises(N.NVMLError_NotSupported):  # a 3g offers no 4-slice compute instance
        N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, N.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 0)
    cis = [N.nvmlGpuInstanceCreateComputeInstance(gi, one.id) for _ in range(3)]
    with pytest.raises(N.NVMLError_InsufficientResources):
        N.nvmlGpuInstanceCreateComputeInstance(gi, one.id)
    infos = [N.nvmlComputeInstanceGetInfo(ci) for ci in cis]
    assert [(i.id, i.placement.start, i.placement.size) for i in infos] == [(0, 0, 1), (1, 1, 1), (2, 2, 1)]
    with pytest.raises(N.NVMLError_InUse):  # it still has compute instances
        N.nvmlGpuInstanceDestroy(gi)
    gi_id = N.nvmlGpuInstanceGetInfo(gi).id
    pid = node.add_process(0, 1 << 30, gpu_instance=gi_id, compute_instance=2)
    with pytest.raises(N.NVMLError_InUse):  # a process runs in it
        N.nvmlComputeInstanceDestroy(cis[2])
    N.nvmlComputeInstanceDestroy(cis[0])
    N.nvmlComputeInstanceDestroy(cis[1])
    node.remove_process(pid)
    N.nvmlComputeInstanceDestroy(cis[2])
    N.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(N.NVMLError_InvalidArgument):  # the handle of a destroyed instance
        N.nvmlGpuInstanceGetInfo(gi)
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetGpuInstanceById(h, gi_id)


def test_a_gpu_not_in_mig_mode_answers_not_supported(sim):
    sim()
    h = N.nvmlDeviceGetHandleByIndex(0)
    for call in (
        lambda: N.nvmlDeviceCreateGpuInstance(h, 19),
        lambda: N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19),
        lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0),
    ):
        with pytest.raises(N.NVMLError_NotSupported):
            call()


def test_mig_device_handles_answer_for_their_instance(sim):
    node = sim("dgx-a100")
    h = mig_on(node)
    big = create(h, N.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 0)
    small = create(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 6)
    full_ci(big)
    full_ci(small)
    assert N.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    m0, m1 = (N.nvmlDeviceGetMigDeviceHandleByIndex(h, i) for i in (0, 1))
    with pytest.raises(N.NVMLError_NotFound):
        N.nvmlDeviceGetMigDeviceHandleByIndex(h, 2)
    assert N.nvmlDeviceIsMigDeviceHandle(m0).value == 1 and N.nvmlDeviceIsMigDeviceHandle(h).value == 0
    assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m1)) == 0
    ids = [(N.nvmlDeviceGetGpuInstanceId(m), N.nvmlDeviceGetComputeInstanceId(m)) for m in (m0, m1)]
    assert ids == [(N.nvmlGpuInstanceGetInfo(big).id, 0), (N.nvmlGpuInstanceGetInfo(small).id, 0)]
    uuids = [N.nvmlDeviceGetUUID(m) for m in (m0, m1)]
    assert all(u.startswith("MIG-") for u in uuids) and len(set(uuids)) == 2
    assert N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)) == uuids[1]  # stable
    assert N.nvmlDeviceGetUUID(h) == node.gpu(0).uuid  # the parent answers as before
    assert N.nvmlDeviceGetName(m1) == "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    node.add_process(0, 3 << 30, gpu_instance=ids[1][0], compute_instance=0)
    mem = N.nvmlDeviceGetMemoryInfo(m1, version=N.nvmlMemory_v2)
    assert (mem.total, mem.used, mem.free) == (9856 * MiB, 3 << 30, 9856 * MiB - (3 << 30))
    assert N.nvmlDeviceGetMemoryInfo(m0).used == 0
    with pytest.raises(N.NVMLError_NotSupported):  # as on real hardware
        N.nvmlDeviceGetUtilizationRates(m0)
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetGpuInstanceId(h)
    with pytest.raises(N.NVMLError_InvalidArgument):  # other calls with a MIG handle
        N.nvmlDeviceGetPowerUsage(m0)


def test_processes_in_an_instance_report_its_ids(sim):
    node = sim()
    h = mig_on(node)
    gi = create(h, N.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 0)
    full_ci(gi)
    gi_id = N.nvmlGpuInstanceGetInfo(gi).id
    pid = node.add_process(0, 2 << 30, gpu_instance=gi_id, compute_instance=0)
    procs = N.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in procs] == [(pid, gi_id, 0)]  # no job in MIG mode
    mig = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(mig)] == [pid]
    other = N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(1))
    assert other and all(p.gpuInstanceId == NO_ID and p.computeInstanceId == NO_ID for p in other)
    with pytest.raises(FaultError, match="gpu_instance: GPU 0 is in MIG mode"):
        node.add_process(0, 1 << 20)
    with pytest.raises(FaultError, match="gpu_instance: GPU 1 is not in MIG mode"):
        node.add_process(1, 1 << 20, gpu_instance=1, compute_instance=0)
    with pytest.raises(FaultError, match="no compute instance 5"):
        node.add_process(0, 1 << 20, gpu_instance=gi_id, compute_instance=5)
    node.reset_gpu(0)  # a reset ends the GPU's processes and instances
    assert N.nvmlDeviceGetComputeRunningProcesses(h) == []


def test_an_xid_in_an_instance_carries_its_ids(sim):
    node = sim()
    h = mig_on(node)
    gi = create(h, N.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 0)
    full_ci(gi)
    gi_id = N.nvmlGpuInstanceGetInfo(gi).id
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
    assert node.inject_instance_xid(0, 43, gpu_instance=gi_id, compute_instance=0) == 1
    data = N.nvmlEventSetWait_v2(es, 1000)
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (43, gi_id, 0)
    node.inject(0, "xid", xid=31)  # a fault of the whole card
    data = N.nvmlEventSetWait_v2(es, 1000)
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (31, NO_ID, NO_ID)
    with pytest.raises(FaultError, match="no GPU instance 9"):
        node.inject_instance_xid(0, 43, gpu_instance=9)
    N.nvmlEventSetFree(es)


def with_mig(scenario, gpu, mig):
    data = copy.deepcopy(load_scenario(scenario).raw)
    data["gpus"][gpu]["mig"] = mig
    return parse_scenario(data)


def test_a_scenario_starts_a_card_in_mig_mode_with_its_instances(sim):
    spec = with_mig("dgx-h100", 3, {"enabled": True, "instances": [
        {"profile": "3g.40gb", "placement": 0, "compute_instances": ["2c.3g.40gb", "1c.3g.40gb"]},
        {"profile": "1g.10gb"},
        {"profile": "2g.20gb", "placement": 4, "compute_instances": []},
    ]})
    node = sim(spec)
    h = N.nvmlDeviceGetHandleByIndex(3)
    assert N.nvmlDeviceGetMigMode(h) == [1, 1]
    infos = sorted((i.id, i.profileId, i.placement.start) for i in (
        N.nvmlGpuInstanceGetInfo(N.nvmlDeviceGetGpuInstanceById(h, gi_id)) for gi_id in (1, 2, 3)))
    assert infos == [(1, 9, 0), (2, 19, 6), (3, 14, 4)]
    assert [N.nvmlDeviceGetName(N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)) for i in range(3)] == [
        "NVIDIA H100 80GB HBM3 MIG 2c.3g.40gb", "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"]
    assert node.processes_on(3) == []  # the load profile's job does not run on a MIG card
    assert N.nvmlDeviceGetMigMode(N.nvmlDeviceGetHandleByIndex(0)) == [0, 0]


@pytest.mark.parametrize(("mig", "message"), [
    ({"enabled": False, "instances": [{"profile": "7g.80gb"}]}, r"gpus\[0\]\.mig\.instances: instances need enabled: true"),
    ({"enabled": True, "instances": [{"profile": "5g.50gb"}]}, r"gpus\[0\]\.mig\.instances\[0\]\.profile: '5g.50gb' is not a MIG profile"),
    ({"enabled": True, "instances": [{"profile": "3g.40gb", "placement": 2}]}, r"instances\[0\]\.placement: placement start 2 is not one"),
    ({"enabled": True, "instances": [{"profile": "4g.40gb"}, {"profile": "2g.20gb", "placement": 2}]},
     r"instances\[1\]\.placement: memory slices 2..3 overlap 4g.40gb at 0"),
    ({"enabled": True, "instances": [{"profile": "7g.80gb"}, {"profile": "1g.10gb"}]}, r"instances\[1\]\.profile: no free placement"),
    ({"enabled": True, "instances": [{"profile": "2g.20gb", "compute_instances": ["1c.3g.40gb"]}]},
     r"instances\[0\]\.compute_instances\[0\]: '1c.3g.40gb' is not a compute instance profile of 2g.20gb"),
    ({"enabled": True, "instances": [{"profile": "2g.20gb", "compute_instances": ["2g.20gb", "1c.2g.20gb"]}]},
     r"compute_instances\[1\]: no room left for 1c.2g.20gb"),
    ({"enabled": "yes"}, r"gpus\[0\]\.mig\.enabled"),
    ({"enabled": True, "instances": [{"profile": "7g.80gb", "size": 8}]}, r"gpus\[0\]\.mig\.instances\[0\]\.size: unknown key"),
])
def test_a_bad_mig_entry_is_refused_naming_the_field(mig, message):
    with pytest.raises(ScenarioError, match=message):
        with_mig("dgx-h100", 0, mig)


def test_mig_on_a_model_without_a_geometry_is_refused():
    data = copy.deepcopy(load_scenario("dgx-h100").raw)
    data["models"]["h100-sxm5-80gb"]["mig_capable"] = False
    data["gpus"][0]["mig"] = {"enabled": True}
    with pytest.raises(ScenarioError, match=r"gpus\[0\]\.mig\.enabled: model h100-sxm5-80gb .* has no MIG geometry"):
        parse_scenario(data)


def test_the_same_seed_gives_the_same_instances_and_uuids(clock):
    def run():
        node = SimulatedNode(load_scenario("hgx-h200"), seed=11, clock=clock)
        install(node)
        N.nvmlInit()
        try:
            h = mig_on(node, 5)
            for pid in (9, 14, 19, 19):
                full_ci(N.nvmlDeviceCreateGpuInstance(h, pid))
            out = []
            for i in range(4):
                m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                out.append((N.nvmlDeviceGetUUID(m), N.nvmlDeviceGetGpuInstanceId(m), N.nvmlDeviceGetName(m)))
            return out
        finally:
            uninstall()

    first = run()
    assert first == run()
    assert [name.split()[-1] for _, _, name in first] == ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
