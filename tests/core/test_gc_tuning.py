"""The collector's settings while serving, and their restoration (the command can run in a test's process)."""

from __future__ import annotations

import gc

from runtimekit.gc_tuning import YOUNG_THRESHOLD, tuned_for_serving


def test_serving_freezes_the_start_up_heap_and_raises_the_young_threshold_then_restores_both() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with tuned_for_serving():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 1000, "the modules imported so far are frozen"
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_settings_are_restored_when_serving_raises() -> None:
    before = gc.get_threshold()
    try:
        with tuned_for_serving():
            raise OSError("the port is taken")
    except OSError:
        pass
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
