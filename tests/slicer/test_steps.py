"""The journaled steps (runtimekit.slicer.steps): what they refuse before changing anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtimekit.gpu.mig import MigControl
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.slicer.journal import Journal, Record
from runtimekit.slicer.steps import Books, make
from runtimekit.state.slices import SliceSpec


def test_a_mig_record_without_its_placement_is_refused_before_anything_is_journaled(tmp_path: Path) -> None:
    books = Books(Journal.in_state_dir(tmp_path), MigControl(NvmlSession()), "runtimekit.io")
    record = Record(id="s-0123456789ab", phase="creating", spec=SliceSpec(mode="mig", compute=10, memory_mib=1024),
                    gpu_uuid="GPU-fe447eaf-b90a-4137-9cde-91d400b091db", gpu_index=0, created_at=0.0, compute=14,
                    memory_mib=9856, profile="1g.10gb", profile_id=None, start=0)
    with pytest.raises(ValueError, match="s-0123456789ab: profile_id and start: both set for a MIG slice"):
        make(books, record)
    assert books.journal.records() == [] and books.records == {}
    books.journal.close()
