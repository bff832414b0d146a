"""Percentiles of measured latencies, by nearest rank: the smallest value with at least q of the
values at or below it. ``int(n * 0.99)`` instead takes the maximum for any n up to 100 (at 100
events it is the 100th of 100), so a "p99" of a short run was its worst value."""

from __future__ import annotations

import math
from collections.abc import Sequence


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1) of ``sorted_values`` (ascending, not empty)."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]
