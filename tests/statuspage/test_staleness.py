"""How old the data is: ``GET /api/v1/node`` dates the sample and the attribution by the agent's own
clock (``age_seconds``, ``stale`` past ``stale_after_seconds``: a few sampling periods), and
``runtimekit status`` says so, one-shot and under ``--watch``, with ``STALE`` and a warning line
when the sampler is stuck (the last sample stays in place, numbers frozen)."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from exporter_factories import REFRESHED_AT, SAMPLED_AT, make_attribution, make_snapshot, make_state
from statuspage_factories import make_node, serving_json

from runtimekit.cli import main
from runtimekit.state import NodeState
from runtimekit.status_frame import render
from runtimekit.statuspage import NODE_PATH, add_status_routes, render_node
from runtimekit.statuspage.node_json import STALE_CYCLES, STALE_FLOOR_SECONDS

CYCLE_SECONDS = 0.05  # the factories' sampler stats: the last cycle's duration
DEFAULT_LIMIT = STALE_CYCLES * (1.0 + CYCLE_SECONDS)  # the factories' sampler: every 1 s


def sampled_every(seconds: float) -> NodeState:
    """The factories' node, its sampler's published period ``seconds`` (its interval)."""
    state = make_node()
    view = state.view()
    assert view.snapshot is not None
    state.publish_snapshot(view.snapshot, dataclasses.replace(view.sampler, period_seconds=seconds))
    return state


def document(state: NodeState | None = None, *, now: float) -> dict:
    return render_node((state or make_node()).view(), node="test node", version="9.9.9", now=now)


def test_a_fresh_document_dates_each_part_by_the_agents_clock():
    fresh = document(now=SAMPLED_AT + 0.9)
    assert fresh["agent"]["generated_at_unix"] == SAMPLED_AT + 0.9
    assert fresh["agent"]["sample_interval_seconds"] == 1.0
    assert fresh["agent"]["stale_after_seconds"] == pytest.approx(DEFAULT_LIMIT)
    assert fresh["sample"]["sampled_at_unix"] == SAMPLED_AT
    assert (fresh["sample"]["age_seconds"], fresh["sample"]["stale"]) == (pytest.approx(0.9), False)
    assert fresh["attribution"] == {"refreshed_at_unix": REFRESHED_AT, "age_seconds": pytest.approx(0.4), "stale": False}


def test_a_sample_older_than_a_few_sampling_intervals_is_stale():
    stale = document(now=SAMPLED_AT + 30)  # a sampler stuck in the driver for half a minute
    assert (stale["sample"]["age_seconds"], stale["sample"]["stale"]) == (30, True)
    assert stale["attribution"]["stale"] is True  # the attributor waits for samples: as old
    just = document(now=SAMPLED_AT + DEFAULT_LIMIT - 0.01)
    assert just["sample"]["stale"] is False


def test_an_attributor_stuck_alone_is_stale_alone():
    state = make_node()
    state.publish_attribution(make_attribution(refreshed_at=SAMPLED_AT - 20))
    stale = document(state, now=SAMPLED_AT + 0.5)
    assert stale["sample"]["stale"] is False
    assert stale["attribution"] == {"refreshed_at_unix": SAMPLED_AT - 20, "age_seconds": 20.5, "stale": True}


def test_the_limit_follows_the_agents_interval_and_nvml_retries():
    fast = document(sampled_every(0.1), now=SAMPLED_AT + 1.2)
    assert fast["agent"]["sample_interval_seconds"] == 0.1
    assert fast["agent"]["stale_after_seconds"] == STALE_FLOOR_SECONDS and fast["sample"]["stale"] is True
    slow = document(sampled_every(10), now=SAMPLED_AT + 20)
    assert slow["sample"]["stale"] is False
    # NVML down: the sampler tries again every nvml_retry_seconds (10 s), not every interval.
    down = make_state(make_snapshot((), nvml_up=False, nvml_error="NVML_ERROR_DRIVER_NOT_LOADED"))
    retrying = document(down, now=SAMPLED_AT + 12)
    assert retrying["agent"]["stale_after_seconds"] == pytest.approx(STALE_CYCLES * (10 + CYCLE_SECONDS))
    assert retrying["sample"]["stale"] is False and retrying["attribution"] is None


def test_a_clock_stepped_back_never_gives_a_negative_age():
    early = document(now=SAMPLED_AT - 5)
    assert (early["sample"]["age_seconds"], early["sample"]["stale"]) == (0.0, False)


def test_before_the_first_sample_nothing_is_dated():
    empty = document(NodeState(), now=SAMPLED_AT)
    assert (empty["sample"], empty["attribution"]) == (None, None)
    assert "STALE" not in render(empty) and " old" not in render(empty).splitlines()[0]


async def test_the_served_document_is_dated_now_by_the_agent_at_its_interval():
    app = web.Application()
    add_status_routes(app, sampled_every(0.5), "test node")
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        document_ = await (await client.get(NODE_PATH)).json()
    assert document_["agent"]["sample_interval_seconds"] == 0.5
    assert document_["sample"]["stale"] is True  # the factories sampled in 2023: long stale
    assert document_["sample"]["age_seconds"] == pytest.approx(document_["agent"]["generated_at_unix"] - SAMPLED_AT)
    assert time.time() - 5 < document_["agent"]["generated_at_unix"] <= time.time()


# -- runtimekit status ------------------------------------------------------------------------------


def test_the_frame_says_how_old_the_sample_and_attribution_are():
    head = render(document(now=SAMPLED_AT + 0.9)).splitlines()[0]
    assert head.endswith(", sample 0.9 s old, attribution 0.4 s old") and "STALE" not in head


def test_a_stale_frame_says_stale_in_words_not_only_colour():
    lines = render(document(now=SAMPLED_AT + 42)).splitlines()
    assert lines[0].endswith(", sample 42 s old STALE, attribution 42 s old STALE")
    assert lines[1] == ("STALE: no new GPU sample for 42 s (the agent samples every 1 s): the numbers below are the "
                        "last ones read (the sampler may be stuck in the driver)")
    assert lines[2] == "STALE: processes and pods last attributed 42 s ago: they may have changed"
    assert lines[3] == "" and lines[4].startswith("GPU ")
    coloured = render(document(now=SAMPLED_AT + 42), colour=True)
    assert "\x1b[33mSTALE: no new GPU sample" in coloured


@pytest.mark.parametrize("age, shown", [(0.04, "0.0 s"), (9.94, "9.9 s"), (61, "61 s"), (600, "10 min"),
                                        (3 * 3600, "3 h"), (3 * 86400, "3 d")])
def test_ages_are_written_for_people(age, shown):
    assert f"sample {shown} old" in render(document(now=SAMPLED_AT + age)).splitlines()[0]


def test_one_shot_and_watch_say_a_stuck_sampler_is_stale(capsys):
    with serving_json(json.dumps(document(now=SAMPLED_AT + 600)).encode()) as address:  # no sample for ten minutes
        assert main(["status", "--address", address]) == 0  # stale is said, not an error
        one_shot = capsys.readouterr().out
        assert main(["status", "--address", address, "--watch", "--interval", "0.1", "--iterations", "2"]) == 0
        watched = capsys.readouterr().out
    assert "sample 10 min old STALE" in one_shot.splitlines()[0]
    assert one_shot.count("STALE: no new GPU sample for 10 min") == 1
    assert watched.count("STALE: no new GPU sample for 10 min") == 2 and watched.count("every 0.1 s, at ") == 2
