"""Owners and grace periods: a pod owner gone for the grace period is due; unknown never is."""

from __future__ import annotations

from runtimekit.slicer.owners import Grace, OwnerWatch
from runtimekit.state.slices import Owner

POD = Owner(pod_uid="u1", container="c")
FREE = Owner(owner_id="me")


def test_grace_counts_from_first_seen_and_forgets_keys_that_leave() -> None:
    grace: Grace[str] = Grace(10)
    assert grace.due(["a"], 100) == []
    assert grace.due(["a", "b"], 109) == []
    assert grace.due(["a", "b"], 110) == ["a"]
    assert grace.due(["b"], 111) == []  # a left
    assert grace.due(["a", "b"], 125) == ["b"]  # a starts again at 125


def test_a_pod_seen_running_then_gone_is_due_after_the_grace_a_free_owner_never() -> None:
    watch = OwnerWatch(grace_seconds=60, start_seconds=600)
    owners = [("s-1", POD), ("s-2", FREE)]
    assert watch.due(owners, frozenset({"u1"}), 0) == []  # seen running
    assert watch.due(owners, frozenset(), 10) == []
    assert watch.due(owners, frozenset(), 70) == ["s-1"]
    assert watch.due(owners, frozenset({"u1"}), 71) == []


def test_a_pod_never_seen_running_gets_the_start_grace() -> None:
    watch = OwnerWatch(grace_seconds=60, start_seconds=600)
    owners = [("s-1", POD)]
    assert watch.due(owners, frozenset(), 0) == []
    assert watch.due(owners, frozenset(), 599) == []  # still pulling its image, say
    assert watch.due(owners, frozenset(), 600) == ["s-1"]


def test_a_pod_that_starts_late_then_goes_gets_the_short_grace_from_then() -> None:
    watch = OwnerWatch(grace_seconds=60, start_seconds=600)
    owners = [("s-1", POD)]
    watch.due(owners, frozenset(), 0)
    watch.due(owners, frozenset({"u1"}), 300)  # its container runs
    assert watch.due(owners, frozenset(), 310) == []
    assert watch.due(owners, frozenset(), 370) == ["s-1"]


def test_unknown_pods_reclaim_nothing_and_restart_the_grace() -> None:
    watch = OwnerWatch(grace_seconds=60, start_seconds=60)
    owners = [("s-1", POD)]
    watch.due(owners, frozenset(), 0)
    assert watch.due(owners, None, 100) == []
    assert watch.due(owners, frozenset(), 101) == []  # counted again from 101
