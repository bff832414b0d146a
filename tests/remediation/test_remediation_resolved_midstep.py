"""A "resolved" notification that arrives while a step runs.

The step has begun (its attempt is committed), so the resolution leaves it alone: it runs to its
outcome, the journal records that outcome (not "skipped: resolved before the step ran"), and the
circuit breaker and the cooldown, which count done steps, count it. Steps not begun are skipped,
also one the worker had already read as pending: it must not run after the resolution.

The race is made deterministic, not timed: the step holds on an ``asyncio.Event`` after it acted
(the spare-node endpoint acted but has not answered; the cordon PATCH took effect) while the
resolution is journaled, and is released after it.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import AUTH, alert_body, wait_for, write_config

from runtimekit.kube.remediation.actions import Steps, plan
from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.holds import CORDONED_BY
from runtimekit.kube.remediation.journal import Journal
from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from runtimekit.kube.remediation.payload import parse
from runtimekit.kube.remediation.server import JOURNAL, Worker, make_app
from tests.kube_fakes import FakeKube, FakeReplacement, serve

GUARD_SECONDS = 10  # only a guard against a hang: every wait below ends on an event


class Hold:
    """Holds a step once it acted: ``acted`` is set when it gets there, and it goes on once
    ``release`` is set (steps that come later, the release already set, pass straight through)."""

    def __init__(self) -> None:
        self.acted, self.release = asyncio.Event(), asyncio.Event()

    async def __call__(self) -> None:
        self.acted.set()
        await self.release.wait()

    async def reached(self) -> None:
        await asyncio.wait_for(self.acted.wait(), GUARD_SECONDS)


class HeldAfterPatch:
    """The real NodeApi, held by ``hold`` after each PATCH took effect at the API server."""

    def __init__(self, api: KubernetesNodeApi, hold: Hold) -> None:
        self.api, self.hold = api, hold

    async def patch_node(self, *args, **kwargs):
        result = await self.api.patch_node(*args, **kwargs)
        await self.hold()
        return result

    def __getattr__(self, name: str):
        return getattr(self.api, name)


@pytest.fixture
async def held(tmp_path):
    """(FakeKube, FakeReplacement, its URL, Hold): the spare-node endpoint acts on a request and
    answers only once the hold is released."""
    kube, replacement, hold = FakeKube(), FakeReplacement(), Hold()

    async def replace(request: web.Request) -> web.StreamResponse:
        answer = await replacement.replace(request)
        await hold()
        return answer

    app = web.Application()
    app.router.add_post("/replace", replace)
    kube_runner, kube_url = await serve(kube.app)
    runner, url = await serve(app)
    (tmp_path / "kubeconfig").write_text(kube.kubeconfig(kube_url))
    (tmp_path / "token").write_text("s3cret\n")
    yield kube, replacement, url + "/replace", hold
    hold.release.set()
    await runner.cleanup()
    await kube_runner.cleanup()


def _receive(journal: Journal, config, **alert) -> None:
    journal.receive(parse(alert_body(**alert)).alerts, lambda a: plan(config, a), time.time())


async def _metric(client: TestClient) -> bool:
    text = await (await client.get("/metrics", headers=AUTH)).text()
    return "runtimekit_remediation_outcomes_not_recorded_total 1" in text


def _states(journal: Journal) -> dict[tuple[str, str], tuple[str, object]]:
    return {(a.fingerprint, a.kind): (a.state, a.result) for a in journal.actions()}


async def test_a_replacement_in_flight_when_its_alert_resolves_is_done_and_counted(held, tmp_path):
    kube, replacement, url, hold = held
    config = load(write_config(tmp_path, url, ladders={"replace_node": ["replace"]},
                               breaker={"max_nodes": 1, "max_percent": 100, "min_nodes": 1}))
    journal = Journal(config.db_path)
    _receive(journal, config, fingerprint="a", node="gpu-1")
    async with aiohttp.ClientSession() as session:
        worker = Worker(config, journal, Steps(config, KubernetesNodeApi(str(tmp_path / "kubeconfig")), session))
        running = asyncio.create_task(worker.run_once())
        await hold.reached()  # the spare node is requested; the answer is held
        _receive(journal, config, fingerprint="a", node="gpu-1", status="resolved")
        hold.release.set()
        assert await asyncio.wait_for(running, GUARD_SECONDS) == 1
        state, result = _states(journal)[("a", "replace")]
        assert state == "done" and result["status"] == 200 and '"accepted": true' in result["response"]
        assert [node for node, _ in journal.actioned(0)] == ["gpu-1"]
        # the cooldown counts it: another alert on gpu-1 is left alone ...
        _receive(journal, config, fingerprint="c", node="gpu-1")
        await worker.run_once()
        # ... and the breaker counts it: a second node exceeds max_nodes 1
        _receive(journal, config, fingerprint="b", node="gpu-2")
        await worker.run_once()
    states = _states(journal)
    assert states[("c", "replace")][0] == "skipped" and "cooldown" in states[("c", "replace")][1]["reason"]
    assert states[("b", "replace")][0] == "skipped"
    assert "circuit breaker opened: 2 nodes" in states[("b", "replace")][1]["reason"]
    assert journal.breaker_state()[0] is True
    assert [body["node"] for body in replacement.replacements.values()] == ["gpu-1"]


async def test_a_step_the_worker_read_as_pending_is_not_run_after_the_resolution(held, tmp_path):
    """Ladder cordon, replace: the alert resolves while the cordon runs. The cordon completes and
    is counted; the replace, not begun, is skipped although the worker had it in hand; the undo
    then releases the node."""
    kube, replacement, url, hold = held
    config = load(write_config(tmp_path, url, ladders={"replace_node": ["cordon", "replace"]}))
    journal = Journal(config.db_path)
    _receive(journal, config, fingerprint="a", node="gpu-2")
    async with aiohttp.ClientSession() as session:
        api = HeldAfterPatch(KubernetesNodeApi(str(tmp_path / "kubeconfig")), hold)
        worker = Worker(config, journal, Steps(config, api, session))
        running = asyncio.create_task(worker.run_once())
        await hold.reached()  # the node is cordoned; the answer is held
        _receive(journal, config, fingerprint="a", node="gpu-2", status="resolved")
        hold.release.set()
        await asyncio.wait_for(running, GUARD_SECONDS)
        states = _states(journal)
        assert states[("a", "cordon")][0] == "done"
        assert states[("a", "replace")] == ("skipped", {"reason": "alert resolved before the step ran"})
        assert replacement.calls == []
        assert [node for node, _ in journal.actioned(0)] == ["gpu-2"]
        await worker.run_once()  # the uncordon the resolution enqueued
    assert _states(journal)[("a", "uncordon")][0] == "done"
    node = kube.nodes["gpu-2"]
    assert not node["spec"].get("unschedulable") and CORDONED_BY not in node["metadata"].get("annotations", {})


async def test_an_outcome_the_journal_cannot_record_is_logged_and_counted(held, tmp_path, caplog):
    """Should a begun step's row be no longer pending when it finishes (here changed by hand, as a
    resolution of an older build did), its outcome is logged as a warning and counted in
    /metrics, not dropped in silence."""
    _, _, url, hold = held
    app = make_app(load(write_config(tmp_path, url, ladders={"replace_node": ["replace"]},
                                     worker_interval_seconds=0.01)))
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        assert (await client.post("/api/v1/alerts", json=alert_body(node="gpu-3"), headers=AUTH)).status == 200
        await hold.reached()
        with sqlite3.connect(app[JOURNAL].path) as other:
            other.execute("UPDATE actions SET state = 'skipped', result = '{}' WHERE kind = 'replace'")
        with caplog.at_level(logging.WARNING, logger="runtimekit.kube.remediation.server"):
            hold.release.set()
            await wait_for(lambda: _metric(client), GUARD_SECONDS, "the outcome to be counted in /metrics")
    finally:
        await client.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("replace on gpu-3" in line and "no longer pending" in line and "done" in line for line in lines), lines


class HeldWhileCounting:
    """The real NodeApi, held by ``hold`` while the breaker counts the cluster's nodes."""

    def __init__(self, api: KubernetesNodeApi, hold: Hold) -> None:
        self.api, self.hold = api, hold

    async def count_nodes(self) -> int:
        await self.hold()
        return await self.api.count_nodes()

    def __getattr__(self, name: str):
        return getattr(self.api, name)


async def test_an_alert_resolved_while_the_breaker_counts_the_nodes_opens_nothing(held, tmp_path):
    """The gate runs before the step begins, and counting the cluster's nodes takes an API call: an
    alert that resolves meanwhile must not open the breaker for a step that will not run, nor
    leave an outcome the journal cannot record. 1 node of 4 is over max_percent 20: the gate
    would open the breaker, had the alert not resolved."""
    _, replacement, url, hold = held
    config = load(write_config(tmp_path, url, ladders={"replace_node": ["replace"]},
                               breaker={"max_nodes": 10, "max_percent": 20, "min_nodes": 1}))
    journal = Journal(config.db_path)
    _receive(journal, config, fingerprint="a", node="gpu-1")
    async with aiohttp.ClientSession() as session:
        api = HeldWhileCounting(KubernetesNodeApi(str(tmp_path / "kubeconfig")), hold)
        worker = Worker(config, journal, Steps(config, api, session))
        running = asyncio.create_task(worker.run_once())
        await hold.reached()  # the gate is counting the nodes
        _receive(journal, config, fingerprint="a", node="gpu-1", status="resolved")
        hold.release.set()
        assert await asyncio.wait_for(running, GUARD_SECONDS) == 0
    assert journal.breaker_state()[0] is False
    assert _states(journal)[("a", "replace")] == ("skipped", {"reason": "alert resolved before the step ran"})
    assert worker.counters["outcomes_not_recorded"] == 0
    assert replacement.calls == []
