"""The allocator (topology/allocator.py): exact against brute force on random
topologies with the real level structure, the tie-break that keeps groups whole, required GPUs,
NICs paired optimally and never reused, and bad requests named by field."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations, permutations
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtimekit.state.refs import GpuRef
from runtimekit.state.topology import GpuPlace, Level, Link, NicPlace, Topology
from runtimekit.topology.allocator import Allocation, AllocationError, allocate, brute_force

# (socket, numa node, PCIe switch) of a device: the levels a pair can share, nearest last.
Slot = tuple[int, int, int]


def level_of(a: Slot, b: Slot) -> Level:
    """The nearest level two slots share (the design's rule, over slot numbers)."""
    if a == b:
        return "pcie_switch"
    if a[:2] == b[:2]:
        return "numa"
    return "socket" if a[0] == b[0] else "system"


def make_topology(slots: Sequence[Slot], nvlinks: dict[tuple[int, int], int], nic_slots: Sequence[Slot] = ()) -> Topology:
    """A topology of len(slots) GPUs (index = position) and NICs mlx5_<i> at nic_slots."""
    gpus = tuple(GpuPlace(GpuRef(f"GPU-{i}", i), numa_node=s[1], socket=s[0], pcie_switches=(f"sw{s}",)) for i, s in enumerate(slots))
    nics = tuple(NicPlace(f"mlx5_{j}", f"0000:{j:02x}:00.0", numa_node=s[1], socket=s[0], pcie_switches=(f"sw{s}",)) for j, s in enumerate(nic_slots))
    links = {(i, j): Link("nvlink", nvlinks[(i, j)]) if nvlinks.get((i, j)) else Link(level_of(slots[i], slots[j]))
             for i, j in combinations(range(len(slots)), 2)}
    nic_links = {(i, nic.name): Link(level_of(slots[i], nic_slots[j])) for i in range(len(slots)) for j, nic in enumerate(nics)}
    return Topology(gpus, nics, MappingProxyType(links), MappingProxyType(nic_links))


def pcie_inference() -> Topology:
    """8 PCIe GPUs, two per switch, two switches per socket (one NUMA node each); NICs on switches 0 and 2."""
    slots = [(i // 4, i // 4, i // 2) for i in range(8)]
    return make_topology(slots, {}, [(0, 0, 0), (1, 1, 2)])


@st.composite
def scenarios(draw: st.DrawFn, max_gpus: int = 9) -> tuple[Topology, list[int], int, list[int]]:
    """A random node (sockets × NUMA nodes × PCIe switches, NVLink none / NVSwitch / random pairs),
    a free set, a count and a required subset."""
    n = draw(st.integers(1, max_gpus))
    sockets, numas, switches = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    slot = st.tuples(st.integers(0, sockets - 1), st.integers(0, numas - 1), st.integers(0, switches - 1))
    slots = [(s, s * numas + m, (s * numas + m) * switches + w) for s, m, w in draw(st.lists(slot, min_size=n, max_size=n))]
    pairs = list(combinations(range(n), 2))
    mode = draw(st.sampled_from(["none", "nvswitch", "mesh"]))
    if mode == "nvswitch":
        nvlinks = dict.fromkeys(pairs, draw(st.integers(1, 18)))
    elif mode == "mesh":
        nvlinks = {p: draw(st.integers(0, 2)) for p in pairs}
    else:
        nvlinks = {}
    nic_slots = draw(st.lists(slot, max_size=n + 2))
    nic_slots = [(s, s * numas + m, (s * numas + m) * switches + w) for s, m, w in nic_slots]
    topology = make_topology(slots, nvlinks, nic_slots)
    free = draw(st.lists(st.integers(0, n - 1), min_size=1, unique=True))
    count = draw(st.integers(1, len(free)))
    required = draw(st.lists(st.sampled_from(free), max_size=count, unique=True))
    return topology, free, count, required


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_allocate_equals_the_brute_force_optimum(case: tuple[Topology, list[int], int, list[int]]) -> None:
    topology, free, count, required = case
    got = allocate(topology, free, count, required=required)
    assert got == brute_force(topology, free, count, required)  # cost, tie-break and index order
    assert set(required) <= set(got.gpus) <= set(free)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data())
def test_nics_are_an_optimal_assignment_never_reused(case: tuple[Topology, list[int], int, list[int]], data: st.DataObject) -> None:
    topology, free, count, required = case
    names = [nic.name for nic in topology.nics]
    free_nics = data.draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    got = allocate(topology, free, count, required=required, with_nics=True, free_nics=free_nics)
    used = [nic for nic in got.nics if nic]
    assert len(used) == len(set(used)) == min(count, len(free_nics))
    assert set(used) <= set(free_nics)

    def total(pairs: list[tuple[int, str]]) -> int:
        return sum(topology.nic_links[pair].cost for pair in pairs)

    if len(got.gpus) <= len(free_nics):
        best = min(total(list(zip(got.gpus, chosen, strict=True))) for chosen in permutations(free_nics, len(got.gpus)))
    else:
        best = min(total(list(zip(chosen, free_nics, strict=True))) for chosen in permutations(got.gpus, len(free_nics)))
    assert total([(g, nic) for g, nic in zip(got.gpus, got.nics, strict=True) if nic]) == best


def test_sixteen_gpus_exact_on_a_two_level_pcie_tree() -> None:
    """16 GPUs (4 per switch, 2 switches per socket): every size against brute force."""
    topology = make_topology([(i // 8, i // 8, i // 4) for i in range(16)], {(0, 1): 2, (2, 3): 1, (8, 12): 3})
    free = [0, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 15]
    for count in range(1, len(free) + 1):
        assert allocate(topology, free, count) == brute_force(topology, free, count)


def test_two_gpus_on_the_pcie_server_share_a_switch() -> None:
    assert allocate(pcie_inference(), range(8), 2).gpus == (0, 1)
    assert allocate(pcie_inference(), [0, 2, 3, 5], 2).gpus == (2, 3)


def test_one_gpu_is_taken_where_it_leaves_pairs_whole() -> None:
    """go-gpuallocator takes the first free GPU (0), breaking the pair {0, 1}; GPU 2 is alone."""
    topology = pcie_inference()
    assert allocate(topology, [0, 1, 2, 4, 5], 1).gpus == (2,)
    assert allocate(topology, [1, 2, 3, 4, 5, 6, 7], 1).gpus == (1,)  # 1 is alone on its switch


def test_one_gpu_leaves_the_nvlink_pair_whole() -> None:
    """Two NVLink pairs and a lone GPU: the lone one goes, whatever its index."""
    topology = make_topology([(0, 0, 0)] * 5, {(1, 2): 4, (3, 4): 4})
    assert allocate(topology, range(5), 1).gpus == (0,)
    assert allocate(topology, range(1, 5), 2).gpus == (1, 2)
    assert allocate(topology, range(1, 5), 1).gpus == (1,)


def test_required_gpus_are_kept_and_completed_nearest() -> None:
    got = allocate(pcie_inference(), range(8), 2, required=[5])
    assert got == Allocation((4, 5), ("", ""), 50)


def test_nics_on_the_gpus_own_switch_first() -> None:
    got = allocate(pcie_inference(), [4, 5, 6], 2, with_nics=True)
    assert got.gpus == (4, 5) and sorted(got.nics) == ["mlx5_0", "mlx5_1"]  # mlx5_1 on their switch, mlx5_0 across
    assert allocate(pcie_inference(), [4, 5], 2, with_nics=True, free_nics=["mlx5_1"]).nics == ("mlx5_1", "")


@pytest.mark.parametrize("kwargs,field,rule", [
    ({"free": [0, 1], "count": 3}, "count", "3 GPUs asked, 2 free"),
    ({"free": [0, 1], "count": 0}, "count", "at least 1"),
    ({"free": [0, 9], "count": 1}, "free", "GPU 9 is not in the topology (GPUs: 0-7)"),
    ({"free": [0, 1], "count": 1, "required": [2]}, "required", "GPU 2 is not free"),
    ({"free": [0, 1], "count": 1, "required": [0, 1]}, "required", "2 GPUs required, more than count 1"),
    ({"free": [0, 1], "count": 1, "with_nics": True, "free_nics": ["eth9"]}, "free_nics", "NIC 'eth9' is not in the topology"),
])
def test_bad_requests_name_the_field(kwargs: dict, field: str, rule: str) -> None:
    with pytest.raises(AllocationError) as raised:
        allocate(pcie_inference(), **kwargs)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ") and rule in str(raised.value)


def test_iterables_are_read_once() -> None:
    """free and required may be generators (the command line passes one)."""
    got = allocate(pcie_inference(), (i for i in range(8)), 2, required=(i for i in [5]))
    assert got.gpus == (4, 5)


def scenario(name: str) -> Topology:
    from runtimekit.sim import load_scenario
    from runtimekit.topology.offline import topology_from_scenario

    return topology_from_scenario(load_scenario(name))


def test_on_a_dgx_a100_one_gpu_leaves_the_pcie_pair_sharing_its_nics_whole() -> None:
    """Every pair is NV12: GPUs 0 and 1 share a PCIe switch (and mlx5_0/mlx5_1), GPU 2 is alone."""
    topology = scenario("dgx-a100")
    assert allocate(topology, [0, 1, 2], 1).gpus == (2,)
    assert brute_force(topology, [0, 1, 2], 1).gpus == (2,)


def test_on_a_dgx_h100_one_gpu_is_taken_from_the_socket_it_leaves_empty() -> None:
    """Every pair is NV18: 0, 1, 2 on socket 0, 4 alone on socket 1."""
    topology = scenario("dgx-h100")
    assert allocate(topology, [0, 1, 2, 4], 1).gpus == (4,)
    assert brute_force(topology, [0, 1, 2, 4], 1).gpus == (4,)


def test_on_a_dgx_a100_two_gpus_come_from_one_pcie_switch_with_its_nics() -> None:
    topology = scenario("dgx-a100")
    got = allocate(topology, [0, 2, 3, 4], 2, with_nics=True)
    assert got == Allocation((2, 3), ("mlx5_2", "mlx5_3"), Link("nvlink", 12).cost)
    assert brute_force(topology, [0, 2, 3, 4], 2).gpus == (2, 3)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "pcie-inference"])
def test_every_request_on_the_built_in_machines_equals_brute_force(name: str) -> None:
    topology = scenario(name)
    for free in ([0, 1, 2], [0, 1, 2, 4], [0, 2, 3, 4], [1, 3, 4, 5, 6], list(range(8))):
        for count in range(1, len(free) + 1):
            assert allocate(topology, free, count) == brute_force(topology, free, count)


def test_equal_cost_nics_go_by_position_under_their_switch() -> None:
    """DGX A100: GPUs 0 and 1 and NICs mlx5_0 and mlx5_1 under one switch: GPU 1 alone gets mlx5_1
    (the NIC GPU 0 would not take), and GPU 0 alone gets mlx5_0."""
    topology = scenario("dgx-a100")
    assert allocate(topology, [1], 1, with_nics=True).nics == ("mlx5_1",)
    assert allocate(topology, [0], 1, with_nics=True).nics == ("mlx5_0",)
    assert allocate(topology, [3, 7], 2, with_nics=True).nics == ("mlx5_3", "mlx5_9")
    assert allocate(topology, [0, 1], 2, with_nics=True).nics == ("mlx5_0", "mlx5_1")
    assert allocate(topology, [1], 1, with_nics=True, free_nics=["mlx5_0", "mlx5_6"]).nics == ("mlx5_0",)  # cost first
