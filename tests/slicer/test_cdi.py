"""CDI specs of slices: the CDI JSON (SPEC.md of cncf-tags/container-device-interface), the env forms
HAMi-core and MPS read, atomic writes with mode 0644, and which files are ours."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from runtimekit.slicer import cdi

UUID = "GPU-36d351fe-77aa-4a56-bf77-3f9729951fe8"


def test_tdm_env_carries_both_limits_in_every_form() -> None:
    assert cdi.tdm_env(UUID, 2048, 50) == [
        f"CUDA_VISIBLE_DEVICES={UUID}", f"NVIDIA_VISIBLE_DEVICES={UUID}", "CUDA_DEVICE_MEMORY_LIMIT=2048m",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M", "CUDA_DEVICE_SM_LIMIT=50", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
    ]


def test_unlimited_compute_writes_no_compute_limit() -> None:
    env = cdi.tdm_env(UUID, 1024, 0)
    assert not any(e.startswith(("CUDA_DEVICE_SM_LIMIT", "CUDA_MPS_ACTIVE_THREAD")) for e in env)


def test_the_spec_document_names_and_paths() -> None:
    doc = cdi.spec_document("runtimekit.io", "s-0123456789ab", ["A=1"], {"k": "v"})
    assert doc == {"cdiVersion": "0.6.0", "kind": "runtimekit.io/slice",
                   "devices": [{"name": "s-0123456789ab", "annotations": {"k": "v"}, "containerEdits": {"env": ["A=1"]}}]}
    assert cdi.device_name("runtimekit.io", "s-0123456789ab") == "runtimekit.io/slice=s-0123456789ab"
    assert cdi.spec_path("/d", "runtimekit.io", "s-0123456789ab") == Path("/d/runtimekit_io-slice-s-0123456789ab.json")


def test_write_is_atomic_0644_and_remove_takes_it_away(tmp_path: Path) -> None:
    path = cdi.spec_path(tmp_path / "cdi", "runtimekit.io", "s-0123456789ab")
    old = os.umask(0o077)
    try:
        cdi.write_spec(path, {"a": 1})
    finally:
        os.umask(old)
    assert json.loads(path.read_text()) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert cdi.remove_spec(path) and not path.exists()
    assert not cdi.remove_spec(path)


def test_only_our_specs_are_listed(tmp_path: Path) -> None:
    for name in ("runtimekit_io-slice-s-0123456789ab.json", "runtimekit_io-slice-s-0123456789ab.json.tmp",
                 "nvidia.yaml", "runtimekit_io-slice-bad.json", "other_io-slice-s-0123456789ab.json"):
        (tmp_path / name).write_text("{}")
    assert cdi.slice_specs(tmp_path, "runtimekit.io") == {"s-0123456789ab": tmp_path / "runtimekit_io-slice-s-0123456789ab.json"}
    assert cdi.slice_specs(tmp_path / "missing", "runtimekit.io") == {}


def test_a_spec_whose_folder_is_not_a_folder_is_not_there(tmp_path: Path) -> None:
    """Removing it (a rollback, a delete) finds nothing to remove rather than failing for ever."""
    (tmp_path / "cdi").write_text("")
    assert not cdi.remove_spec(cdi.spec_path(tmp_path / "cdi", "runtimekit.io", "s-0123456789ab"))
