"""The memory-leak detector's bucketed history: the path every sample takes (a tuple kept from the
last evaluation) and the path of a history read back from the state file (lists) agree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runtimekit.healthcheck.detectors.memory_leak import BUCKETS, _record

WINDOW = 600.0
WIDTH = WINDOW / BUCKETS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 90.0), st.integers(0, 2**40)), min_size=1, max_size=120),
       st.booleans())
def test_a_kept_history_and_one_read_back_from_json_record_alike(steps, evaluate_twice):
    kept: tuple = ()
    at = 1000.0
    for gap, used in steps:
        at += gap
        horizon = at - WINDOW
        from_json = [list(bucket) for bucket in kept]  # as the state file gives it back
        expected = _record(from_json, at, float(used), WIDTH, horizon)
        kept = _record(kept, at, float(used), WIDTH, horizon)
        assert kept == expected
        assert len(kept) <= BUCKETS + 1 and all(bucket[3] >= horizon for bucket in kept)
        if evaluate_twice:  # an XID-only evaluation at the same instant records nothing new
            assert _record(kept, at, float(used) + 1, WIDTH, horizon) == kept
