"""The driver's per-claim CDI spec for RDMA NICs (kube/dra/cdi.py): its name, its content as CDI
SPEC.md 0.6.0 reads it, its mode, and its removal (a killed writer's temporary file included)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from runtimekit.kube.dra.cdi import KIND, NicDevice, device_id, remove_claim_spec, spec_path, write_claim_spec

UID = "aaaaaaaa-0000-0000-0000-000000000001"
NICS = [NicDevice("nic-mlx5-0", "mlx5_0", ("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm")),
        NicDevice("nic-mlx5-1", "mlx5_1", ("/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"))]
# CDI SPEC.md: a device name is [A-Za-z0-9][A-Za-z0-9_.:-]*; a qualified name is vendor/class=name.
CDI_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


def test_a_claims_nics_are_one_spec_named_by_the_claim(tmp_path: Path) -> None:
    path = write_claim_spec(tmp_path / "cdi", UID, NICS)
    assert path == spec_path(tmp_path / "cdi", UID) == tmp_path / "cdi" / f"runtimekit.io-claim_{UID}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # the container runtime reads it
    spec = json.loads(path.read_text())
    assert (spec["cdiVersion"], spec["kind"]) == ("0.6.0", KIND)
    assert [device["name"] for device in spec["devices"]] == [f"{UID}-nic-mlx5-0", f"{UID}-nic-mlx5-1"]
    assert all(CDI_NAME.fullmatch(device["name"]) for device in spec["devices"])
    assert spec["devices"][1]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/infiniband/uverbs1", "hostPath": "/dev/infiniband/uverbs1"},
        {"path": "/dev/infiniband/rdma_cm", "hostPath": "/dev/infiniband/rdma_cm"}]
    assert spec["containerEdits"]["env"] == ["NCCL_IB_HCA==mlx5_0,mlx5_1"]
    assert device_id(UID, "nic-mlx5-1") == f"runtimekit.io/claim={UID}-nic-mlx5-1"


def test_writing_again_replaces_the_spec(tmp_path: Path) -> None:
    write_claim_spec(tmp_path, UID, NICS)
    write_claim_spec(tmp_path, UID, NICS[:1])
    assert [d["name"] for d in json.loads(spec_path(tmp_path, UID).read_text())["devices"]] == [f"{UID}-nic-mlx5-0"]
    assert sorted(os.listdir(tmp_path)) == [spec_path(tmp_path, UID).name]  # no temporary file left


def test_removal_takes_the_spec_and_a_killed_writers_leftover(tmp_path: Path) -> None:
    path = write_claim_spec(tmp_path, UID, NICS)
    leftover = path.with_name(f".{path.name}.tmp-4242")  # a writer SIGKILLed before its rename
    leftover.write_text("{")
    other = write_claim_spec(tmp_path, "bbbbbbbb-0000-0000-0000-000000000002", NICS)
    assert remove_claim_spec(tmp_path, UID) is True
    assert not path.exists() and not leftover.exists() and other.exists()
    assert remove_claim_spec(tmp_path, UID) is False  # already gone: nothing to do
    assert remove_claim_spec(tmp_path / "missing", UID) is False
