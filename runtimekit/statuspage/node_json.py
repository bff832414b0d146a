"""``GET /api/v1/node``: the node at a glance in one JSON document, what the status page (``/``) and
``runtimekit status`` draw. Every part comes from one ``NodeView`` (one moment of the node state);
the handler never reads hardware. A part not published yet is null (``sample`` before the first
sampling cycle, ``health`` before the first verdict, ``topology`` before the first discovery);
the document itself is always served, so a page can say what it is waiting for.

**Freshness.** The agent's own clock dates every part, so ages are right whatever the reader's
clock says: ``age_seconds`` is ``generated_at_unix`` (when the document was made) less the part's
own time (``sampled_at_unix``, the start of the sampling cycle; ``refreshed_at_unix``, the time
the attribution pass was made for), never below 0. A part is ``stale`` once its age passes
``stale_after_seconds``: ``STALE_CYCLES`` sampling periods (``sample_interval_seconds``: the period
the sampler published, its interval or the NVML retry interval while NVML is down; null before
the first cycle) plus the last cycle's duration, at least ``STALE_FLOOR_SECONDS``. A sampler stuck in
the driver (a stuck cycle holds every later one) or dead leaves the last sample in place: its age
says so. The attributor runs after each sample, so its age goes stale with the sample's, or alone
when it is the one stuck.

The body::

    {"agent": {"version": "0.1.0", "node": "simulated node dgx-h100", "ready": true, "ready_detail": "",
               "generated_at_unix": 1700000000.0, "sample_interval_seconds": 1.0, "stale_after_seconds": 3.15,
               "components": [{"name": "sampler", "up": true, "required": true, "restarts": 0, "last_error": ""}, …]},
     "sample": {"sampled_at_unix": …, "age_seconds": 0.4, "stale": false, "nvml_up": true, "nvml_error": "",
                "driver_version": "550.54.15", "cuda_version": "12.4", "device_count": 8} | null,
     "health": {"state": "healthy", "action": "none", "faults": [{"fault", "severity", "action",
                "evidence", "clearing"}], "evaluated_at_unix": …} | null,
     "attribution": {"refreshed_at_unix": …, "age_seconds": 0.3, "stale": false} | null,
     "gpus": [… runtimekit.statuspage.gpu_json.render_gpu …],
     "slices": [… runtimekit.statuspage.gpu_json.render_slice …],
     "topology": … runtimekit.statuspage.topology_json.render_matrix … | null}

Units and nulls as ``gpu_json`` says. The full health verdict is ``GET /api/v1/health``, the full
topology ``GET /api/v1/topology``.
"""

from __future__ import annotations

import math
from typing import Any

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.types import NodeSnapshot
from runtimekit.state import NodeView
from runtimekit.state.health import NodeHealth
from runtimekit.statuspage.gpu_json import render_fault, render_gpus, render_slices, value
from runtimekit.statuspage.topology_json import render_matrix

NODE_PATH = "/api/v1/node"
#: Sampling periods a part may be old before it is stale (a late cycle or two is not yet staleness).
STALE_CYCLES = 3
#: The least ``stale_after_seconds``, for short intervals: an event loop's jitter is not staleness.
STALE_FLOOR_SECONDS = 1.0


def stale_after(view: NodeView) -> float:
    """Seconds after which the sample (or the attribution) is stale, as the docstring above says:
    from the period the sampler published (``SamplerStats.period_seconds``)."""
    stats = view.sampler
    return max(STALE_CYCLES * (stats.period_seconds + stats.last_duration_seconds), STALE_FLOOR_SECONDS)


def freshness(at: float, now: float, limit: float) -> dict[str, Any]:
    """``age_seconds`` of a part dated ``at`` (agent's clock) in a document made at ``now``, and
    whether it is ``stale`` (older than ``limit``)."""
    age = max(0.0, now - at)
    return {"age_seconds": age, "stale": age > limit}


def render_sample(snapshot: NodeSnapshot | None, now: float, limit: float) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    driver = snapshot.driver
    return {"sampled_at_unix": snapshot.sampled_at, **freshness(snapshot.sampled_at, now, limit),
            "nvml_up": snapshot.nvml_up, "nvml_error": snapshot.nvml_error,
            "driver_version": value(driver.driver_version) if driver else None,
            "cuda_version": value(driver.cuda_driver_version) if driver else None,
            "device_count": snapshot.device_count}


def render_node_health(verdict: NodeHealth | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {"state": verdict.state, "action": verdict.action, "faults": [render_fault(f) for f in verdict.faults],
            "evaluated_at_unix": verdict.evaluated_at}


def render_attribution(attribution: AttributionSnapshot | None, now: float, limit: float) -> dict[str, Any] | None:
    """When processes and pods were last attributed (their rows are in ``gpus``); None before the first pass."""
    if attribution is None:
        return None
    return {"refreshed_at_unix": attribution.refreshed_at, **freshness(attribution.refreshed_at, now, limit)}


def render_node(view: NodeView, *, node: str, version: str, now: float) -> dict[str, Any]:
    """The document above, for ``view``; ``node`` names the node ("simulated node dgx-h100"),
    ``now`` is the unix time it is made at (the agent's clock, the one that dated the parts)."""
    limit = stale_after(view)
    ready, why = view.ready
    return json_safe({
        "agent": {
            "version": version,
            "node": node,
            "ready": ready,
            "ready_detail": why,
            "generated_at_unix": now,
            "sample_interval_seconds": view.sampler.period_seconds or None,
            "stale_after_seconds": limit,
            "components": [{"name": c.name, "up": c.up, "required": c.required, "restarts": c.restarts_total,
                            "last_error": c.last_error} for c in view.components.values()],
        },
        "sample": render_sample(view.snapshot, now, limit),
        "health": render_node_health(view.health),
        "attribution": render_attribution(view.attribution, now, limit),
        "gpus": render_gpus(view.snapshot.gpus if view.snapshot else (), view.health, view.attribution, view.slices),
        "slices": render_slices(view.slices, view.health),
        "topology": render_matrix(view.topology),
    })


def json_safe(document: Any) -> Any:
    """``document`` with every non-finite float (NaN, infinity: invalid JSON) made null."""
    if isinstance(document, float):
        return document if math.isfinite(document) else None
    if isinstance(document, dict):
        return {key: json_safe(item) for key, item in document.items()}
    if isinstance(document, list):
        return [json_safe(item) for item in document]
    return document


def summary(view: NodeView) -> str:
    """One phrase for the page before its script runs: "8 GPUs", or what the agent waits for."""
    snapshot = view.snapshot
    if snapshot is None:
        return "waiting for the first sample"
    if not snapshot.nvml_up:
        return f"NVML unavailable: {snapshot.nvml_error}"
    return f"{snapshot.device_count} GPUs"
