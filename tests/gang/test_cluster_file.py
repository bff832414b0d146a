"""The files of `runtimekit gang plan`: the shipped example reads as its comments say (annotation
offers, a NotReady node, offers from ResourceSlices less a claim), and every broken rule is an
error naming the file, the field and the rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtimekit.kube.gang.cluster import load_cluster, load_gangs
from runtimekit.kube.gang.offer import Offer
from runtimekit.schema import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "gang"
WHOLE = {"v": 1, "gpus_free": 8, "nvlink_groups": [8], "nics_free_by_root": {"pci0": 8}}


def test_the_example_cluster_reads_as_its_comments_say() -> None:
    cluster = load_cluster(EXAMPLE / "cluster.yaml")
    nodes = {node.name: node for node in cluster.nodes}
    assert len(nodes) == 16
    assert cluster.tiers.keys == ("network.topology.nvidia.com/core", "network.topology.nvidia.com/spine",
                                  "network.topology.nvidia.com/leaf")
    assert nodes["dgx-006"].offer is None
    assert nodes["dgx-003"].offer == Offer.of([4], {"pci0000:8d": 2, "pci0000:c0": 2})
    roots = {"pci0000:15": 2, "pci0000:40": 2, "pci0000:8d": 2, "pci0000:c0": 2}
    assert nodes["dgx-000"].offer == Offer.of([8], roots)
    assert nodes["dgx-014"].offer == Offer.of({"nvlink-0": 8}, roots)  # from its ResourceSlice
    assert nodes["dgx-015"].offer == Offer.of({"nvlink-0": 6}, roots | {"pci0000:15": 1})  # less the claim's 2 GPUs and NIC
    assert nodes["dgx-010"].labels["network.topology.nvidia.com/leaf"] == "l2"


def test_the_example_gangs_expand_replicas() -> None:
    gangs = load_gangs(EXAMPLE / "gangs.yaml")
    assert [gang.key for gang in gangs] == ["team-a/llama-70b", "team-b/finetune", "team-c/eval", "team-d/pretrain", "team-e/sweep"]
    llama = gangs[0]
    assert [(pod.name, pod.gpus, pod.nics) for pod in llama.pods] == [("launcher", 0, 0)] + [(f"worker-{i}", 8, 8) for i in range(4)]


def test_json_files_and_inline_slices(tmp_path: Path) -> None:
    slices = json.loads((EXAMPLE / "resourceslices.json").read_text())["items"]
    cluster = {"tiers": ["example.com/rack"], "resourceslices": slices,
               "nodes": [{"name": "dgx-014", "labels": {"example.com/rack": "r1"}}, {"name": "b", "offer": WHOLE}]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster))
    loaded = load_cluster(path)
    assert loaded.tiers.names == ("rack",)
    assert [node.offer.gpus_free if node.offer else None for node in loaded.nodes] == [8, 8]
    assert loaded.nodes[1].labels == {}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("tiers: topograph\n", "cluster.yaml: nodes: required key is missing"),
    ("nodes: [{name: 5, offer: null}]\n", "cluster.yaml: nodes[0].name: must be a string, got int 5"),
    ("nodes: [{name: a, zone: z}]\n", "cluster.yaml: nodes[0].zone: unknown key"),
    ('nodes: [{name: "A/B", offer: null}]\n', "cluster.yaml: nodes[0].name: must be a Node's name: a lower-case DNS subdomain"),
    ('nodes: [{name: "", offer: null}]\n', "cluster.yaml: nodes[0].name: must be a Node's name"),
    ("nodes: [{name: a, labels: {k: 1}}]\n", "cluster.yaml: nodes[0].labels.k: must be a string"),
    ("nodes: [{name: a, offer: {v: 1, gpus_free: 6, nvlink_groups: [8], nics_free_by_root: {}}}]\n",
     "cluster.yaml: nodes[0].offer.gpus_free: must equal the sum of nvlink_groups (8), got 6"),
    ("nodes: [{name: a, offer: {v: 2}}]\n", "cluster.yaml: nodes[0].offer.v: version 2 is not readable here"),
    ("nodes: [{name: a, offer: null}, {name: a, offer: null}]\n", "cluster.yaml: nodes[1].name: 'a' appears twice"),
    ("nodes: [{name: a}]\n", "cluster.yaml: nodes[0]: no offer, and no resourceslices to read it from"),
    ("tiers: aks\nnodes: []\n", "cluster.yaml: tiers: unknown preset 'aks'"),
    ("tiers: [Bad Key]\nnodes: []\n", "cluster.yaml: tiers: 'Bad Key' is not a label key"),
    ("tiers: [5]\nnodes: []\n", "cluster.yaml: tiers[0]: must be a string (a node label key), got int"),
    ("resourceslices: missing.json\nnodes: []\n", "cluster.yaml: resourceslices (missing.json): cannot read"),
    ("resourceslices: [{spec: 3}]\nnodes: [{name: a}]\n", "cluster.yaml: resourceslices[0].spec: must be a mapping"),
    ("nodes: [\n", "cluster.yaml: not valid YAML"),
])
def test_a_broken_cluster_file_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "cluster.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_cluster(path)
    assert str(caught.value).startswith(str(tmp_path / message.split(":")[0])), caught.value
    assert message.partition(": ")[2] in str(caught.value)


def test_a_slices_file_must_hold_a_list(tmp_path: Path) -> None:
    write(tmp_path, "slices.yaml", "kind: List\n")
    path = write(tmp_path, "cluster.yaml", "resourceslices: slices.yaml\nnodes: []\n")
    with pytest.raises(ConfigError, match=r"resourceslices \(slices.yaml\): must hold a list, or a List with items, got dict"):
        load_cluster(path)


@pytest.mark.parametrize(("text", "message"), [
    ("{}\n", "gangs: required key is missing"),
    ("gangs: [{key: a, pods: [{name: w, gpus: -1}]}]\n", "gangs[0].pods[0].gpus: must be >= 0, got -1"),
    ("gangs: [{key: a, pods: [{name: w, gpus: 1, replicas: 0}]}]\n", "gangs[0].pods[0].replicas: must be between 1 and 100000"),
    ("gangs: [{key: a, pods: [{name: w, gpus: true}]}]\n", "gangs[0].pods[0].gpus: must be an integer, got a boolean"),
    ("gangs: [{key: a, pods: [{name: w-0, gpus: 1}, {name: w, replicas: 2, gpus: 1}]}]\n",
     "gangs[0]: gang a: pod name 'w-0' appears twice"),
    ("gangs: [{key: a, pods: []}]\n", "gangs[0]: gang a: pods must list at least one pod"),
    ("gangs: [{key: a, pods: [{name: w, gpus: 1}]}, {key: a, pods: [{name: w, gpus: 1}]}]\n", "gangs[1].key: 'a' appears twice"),
    ("gangs: [{key: ' ', pods: [{name: w, gpus: 1}]}]\n", "gangs[0].key: must not be empty"),
])
def test_a_broken_gangs_file_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "gangs.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_gangs(path)
    assert str(caught.value).startswith(f"{path}: "), caught.value
    assert message in str(caught.value)
