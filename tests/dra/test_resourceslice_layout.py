"""The driver's ResourceSlices as bodies (kube/dra/resourceslices.py): the split layout for 1.35+
and the combined one before, their limits, names and the comparisons that decide a write. Every
body is judged as the API server of its release judges it (strict schema from kubernetes-validate
plus the Go validation's rules, tests/kube_resource_validation.py) and the pool as the scheduler
reads it (``pool_problems``)."""

from __future__ import annotations

import pytest

from runtimekit.kube.dra.devices import inventory
from runtimekit.kube.dra.resourceslices import (
    generate_name,
    pair,
    same_spec,
    slice_body,
    slice_contents,
    split_layout,
    wanted_spec,
)
from tests.dra.publish_nodes import DRIVER, NODE, mig_gpu, nic, node, tdm_gpu, topology
from tests.kube_resource_validation import pool_problems, schema_errors, slice_errors

NODE_UID = "8d3c1d2e-5f4a-4b1c-9e0d-111122223333"


def bodies(found, split: bool, generation: int = 1) -> list[dict]:
    contents = slice_contents(found, split)
    made = [slice_body(wanted_spec(content, DRIVER, NODE, generation, len(contents)), n, NODE_UID)
            for n, content in enumerate(contents)]
    for n, body in enumerate(made):
        body["metadata"]["name"] = body["metadata"]["generateName"] + f"x{n:04d}"  # as the server names it
    return made


def server_errors(body: dict, version: str) -> list[str]:
    return schema_errors(body, version) or slice_errors(body, int(version.split(".")[1]))


def mixed_node():
    """GPU 0 and 1 whole (TDM), GPU 2 and 3 in MIG mode, two NICs."""
    nics = [nic("mlx5_0", "pci0000:10"), nic("mlx5_1", "pci0000:30")]
    return inventory(node(tdm_gpu(0), tdm_gpu(1), mig_gpu(2), mig_gpu(3)), topology(range(4), nics=nics), [])


def test_the_split_layout_puts_counters_in_a_slice_of_their_own_then_a_slice_per_gpu_then_the_nics():
    made = bodies(mixed_node(), split=True)
    specs = [body["spec"] for body in made]
    assert [sorted(k for k in spec if k in ("devices", "sharedCounters")) for spec in specs] == [
        ["sharedCounters"], ["devices"], ["devices"], ["devices"], ["devices"], ["devices"]]
    assert [s["name"] for s in specs[0]["sharedCounters"]] == ["gpu-2-counter-set", "gpu-3-counter-set"]
    assert [[d["name"] for d in spec["devices"]][:1] for spec in specs[1:]] == [
        ["gpu-0"], ["gpu-1"], ["gpu-2-mig-1g10gb-15-0"], ["gpu-3-mig-1g10gb-15-0"], ["nic-mlx5-0"]]
    for body in made:
        assert server_errors(body, "v1.35.0") == [], body["metadata"]["name"]
        assert server_errors(body, "v1.36.0") == []
        assert body["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 6}
        assert body["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE_UID, "controller": True}]
    assert pool_problems(made) == []
    # The 1.34 API server takes the split layout too (devices may consume counters of other slices
    # only from 1.35 on: it refuses those slices), so the layout follows the server's version.
    assert any("must reference a counterSet" in " ".join(server_errors(body, "v1.34.0")) for body in made)


def test_the_combined_layout_before_1_35_keeps_each_gpus_counters_with_its_devices():
    made = bodies(mixed_node(), split=False)
    specs = [body["spec"] for body in made]
    assert len(made) == 5  # GPU 0, 1, 2, 3, NICs
    assert [[s["name"] for s in spec.get("sharedCounters", [])] for spec in specs] == [[], [], ["gpu-2-counter-set"],
                                                                                       ["gpu-3-counter-set"], []]
    for body in made:
        assert server_errors(body, "v1.34.0") == [], body["metadata"]["name"]
    assert pool_problems(made) == []
    assert any("only one of devices and sharedCounters" in " ".join(server_errors(body, "v1.35.0")) for body in made)


def test_more_than_eight_mig_gpus_spread_their_counter_sets_over_slices():
    found = inventory(node(*(mig_gpu(i) for i in range(10))), topology(range(10)), [])
    made = bodies(found, split=True)
    counter_slices = [body for body in made if "sharedCounters" in body["spec"]]
    assert [len(body["spec"]["sharedCounters"]) for body in counter_slices] == [8, 2]
    for body in made:
        assert server_errors(body, "v1.35.0") == []
    assert pool_problems(made) == []


def test_a_gpu_with_more_than_64_counter_consuming_devices_fills_several_slices():
    gpu = mig_gpu(0)
    for extra in range(6):  # made-up profiles: 48 more placements, 73 in all
        gpu.partition_profiles.add(profile_id=40 + extra, name=f"1g.{extra}gb", compute_slices=1, memory_slices=1,
                                   memory_bytes=2**30, placements=range(8))
    made = bodies(inventory(node(gpu), topology([0]), []), split=True)
    sizes = [len(body["spec"].get("devices", [])) for body in made]
    assert sizes == [0, 64, 9]
    assert all(server_errors(body, "v1.35.0") == [] for body in made)


def test_an_empty_pool_is_one_slice_without_devices():
    made = bodies(inventory(node(), topology([]), []), split=True)
    assert [body["spec"].get("devices") for body in made] == [[]]
    assert server_errors(made[0], "v1.35.0") == []


@pytest.mark.parametrize(("version", "split"), [
    ("v1.34.0", False), ("v1.34.2-gke.1100", False), ("v1.35.0", True), ("v1.36.1+k3s1", True), ("1.40.0", True),
    ("v1.4.0", False)])
def test_the_layout_follows_the_server_version(version, split):
    assert split_layout(version) is split


@pytest.mark.parametrize("version", ["", "v2.0.0", "latest"])
def test_a_version_that_is_no_kubernetes_version_is_an_error_naming_it(version):
    with pytest.raises(ValueError, match="gitVersion"):
        split_layout(version)


def test_generate_names_are_lower_case_hex_indexed_and_short_enough():
    assert generate_name(0, DRIVER, NODE) == "0-gpu.runtimekit.io-node-a-"
    assert generate_name(10, DRIVER, "Node-B") == "a-gpu.runtimekit.io-node-b-"
    long = generate_name(1, DRIVER, "n" * 240 + ".example")
    assert len(long) <= 248 and long.endswith("-") and long.startswith("1-gpu.runtimekit.io-nnn")


def test_specs_compare_by_value_as_the_api_server_stores_them():
    wanted = {"devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "1Gi", "requestPolicy": {
        "default": "1Gi", "validRange": {"min": "128Mi", "step": "128Mi", "max": "1Gi"}}}}}]}
    canonical = {"devices": [{"name": "gpu-0", "attributes": {}, "capacity": {"memory": {"value": "1073741824", "requestPolicy": {
        "default": "1024Mi", "validRange": {"min": "134217728", "step": "128Mi", "max": "1Gi"}}}}}], "sharedCounters": []}
    assert same_spec(canonical, wanted)
    assert not same_spec({"devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "2Gi"}}}]},
                         {"devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "1Gi"}}}]})
    assert not same_spec({"devices": [{"name": "x", "attributes": {"b": {"bool": False}}}]}, {"devices": [{"name": "x"}]})


def test_stored_slices_pair_with_the_wanted_ones_that_share_their_devices():
    stored = [{"metadata": {"name": n}, "spec": spec} for n, spec in (
        ("s1", {"devices": [{"name": "nic-mlx5-0"}]}), ("s2", {"devices": [{"name": "gpu-0"}]}),
        ("s3", {"devices": [{"name": "gpu-7"}]}), ("s4", {"sharedCounters": [{"name": "gpu-2-counter-set"}]}))]
    wanted = [{"sharedCounters": [{"name": "gpu-2-counter-set"}]}, {"devices": [{"name": "gpu-0"}]},
              {"devices": [{"name": "gpu-1"}]}, {"devices": [{"name": "nic-mlx5-0"}, {"name": "nic-mlx5-1"}]}]
    paired, obsolete = pair(wanted, stored)
    assert [item["metadata"]["name"] if item else None for item in paired] == ["s4", "s2", None, "s1"]
    assert [item["metadata"]["name"] for item in obsolete] == ["s3"]
    empty = [{"metadata": {"name": "e"}, "spec": {}}]
    assert pair([{"devices": []}], empty) == (empty, [])
