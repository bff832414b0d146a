"""The drain step: evictions through the policy/v1 Eviction API of FakeKube, with the official client.

DaemonSet and mirror pods stay; a PodDisruptionBudget refusal (429) is retried until the bounded
wait runs out, then the step fails naming the pods and the rest of the ladder does not run.
"""
import asyncio

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from conftest import alert_body, write_config

from runtimekit.kube.remediation.actions import StepFailed, Steps, dry_run_result
from runtimekit.kube.remediation.config import ConfigError, load
from runtimekit.kube.remediation.journal import Action
from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from runtimekit.kube.remediation.server import JOURNAL, make_app

AUTH = {"Authorization": "Bearer s3cret"}
LADDER = {"replace_node": ["cordon", "taint", "drain", "replace"]}


def _action(kind="drain", node="gpu-1"):
    return Action(1, "fp1", "2026-01-01T00:00:00Z", node, kind, "pending", 0, "rk-x", None, 0.0, 0.0)


def _populate(kube):
    kube.add_pod("gpu-1", "ml", "train-0")
    kube.add_pod("gpu-1", "ml", "bare", owner_kind=None)
    kube.add_pod("gpu-1", "kube-system", "runtimekit-agent-x", owner_kind="DaemonSet")
    kube.add_pod("gpu-1", "kube-system", "etcd-gpu-1", mirror=True)
    kube.add_pod("gpu-2", "ml", "elsewhere")


async def _steps(tmp_path, session, sleep=asyncio.sleep, **drain):
    config = load(write_config(tmp_path, "http://127.0.0.1:9/x", drain=drain or {"retry_seconds": 0.01}))
    return Steps(config, KubernetesNodeApi(str(tmp_path / "kubeconfig")), session, sleep=sleep)


def test_config_allows_drain_with_bounded_wait(tmp_path):
    (tmp_path / "token").write_text("t")
    config = load(None, {"auth.token_file": str(tmp_path / "token"), "ladders": LADDER})
    assert config.ladders["replace_node"] == ["cordon", "taint", "drain", "replace"]
    assert (config.drain.retry_seconds, config.drain.timeout_seconds) == (5.0, 300.0)
    with pytest.raises(ConfigError, match="drain.timeout_seconds"):
        load(None, {"auth.token_file": "t", "drain.timeout_seconds": -1})
    with pytest.raises(ConfigError, match="listed twice"):
        load(None, {"auth.token_file": "t", "ladders": {"reboot_node": ["drain", "drain"]}})
    assert "Eviction API" in dry_run_result(config, _action(), {})["would"]


async def test_drain_evicts_ordinary_pods_and_skips_daemonset_and_mirror_pods(fakes, tmp_path):
    kube = fakes[0]
    _populate(kube)
    async with aiohttp.ClientSession() as session:
        result = await (await _steps(tmp_path, session)).run(_action(), {}, [])
    assert sorted(result["evicted"]) == ["ml/bare", "ml/train-0"]
    assert result["blocked"] == [] and result["rounds"] == 1
    assert sorted(s["pod"] for s in result["skipped"]) == ["kube-system/etcd-gpu-1", "kube-system/runtimekit-agent-x"]
    assert {s["reason"] for s in result["skipped"]} == {"DaemonSet pod", "mirror pod"}
    assert sorted(kube.pods) == [("kube-system", "etcd-gpu-1"), ("kube-system", "runtimekit-agent-x"),
                                 ("ml", "elsewhere")]
    assert all(status == 201 for _, _, status in kube.evictions)  # every body was a valid policy/v1 Eviction


async def test_blocked_pod_is_retried_until_the_budget_allows_it(fakes, tmp_path):
    kube = fakes[0]
    _populate(kube)
    kube.pdb_blocked.add(("ml", "train-0"))
    waits = []

    async def sleep(seconds):
        waits.append(seconds)
        if len(waits) == 2:
            kube.pdb_blocked.clear()  # the budget allows it again (a replica became ready elsewhere)

    async with aiohttp.ClientSession() as session:
        result = await (await _steps(tmp_path, session, sleep, retry_seconds=2, timeout_seconds=60)).run(
            _action(), {}, [])
    assert waits == [2, 2]
    assert result["rounds"] == 3 and result["blocked"] == []
    assert sorted(result["evicted"]) == ["ml/bare", "ml/train-0"]
    assert [s for n, p, s in kube.evictions if p == "train-0"] == [429, 429, 201]
    assert ("ml", "train-0") not in kube.pods


async def test_blocked_past_the_timeout_fails_and_never_force_deletes(fakes, tmp_path):
    kube = fakes[0]
    _populate(kube)
    kube.pdb_blocked.add(("ml", "train-0"))
    async with aiohttp.ClientSession() as session:
        steps = await _steps(tmp_path, session, retry_seconds=0.02, timeout_seconds=0.1)
        with pytest.raises(StepFailed, match="ml/train-0") as failure:
            await steps.run(_action(), {}, [])
    assert failure.value.result["blocked"] == ["ml/train-0"]
    assert failure.value.result["evicted"] == ["ml/bare"]
    assert failure.value.result["rounds"] >= 2
    assert ("ml", "train-0") in kube.pods  # still there: retried evictions only, no DELETE
    assert {s for n, p, s in kube.evictions if p == "train-0"} == {429}


async def _serve(tmp_path, url, **extra):
    app = make_app(load(write_config(tmp_path, url, ladders=LADDER, **extra)))
    client = TestClient(TestServer(app))
    await client.start_server()
    return client, app


async def _settle(app, until):
    for _ in range(200):
        if until() and not app[JOURNAL].pending():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the worker did not finish")


async def test_ladder_with_drain_over_http_runs_each_step_once(fakes, tmp_path):
    kube, repl, url = fakes
    _populate(kube)
    client, app = await _serve(tmp_path, url, drain={"retry_seconds": 0.02, "timeout_seconds": 5})
    try:
        for _ in range(3):
            assert (await client.post("/api/v1/alerts", json=alert_body(), headers=AUTH)).status == 200
        await _settle(app, lambda: repl.calls)
        await asyncio.sleep(0.2)
        assert len(repl.calls) == 1
        actions = sorted((await (await client.get("/api/v1/actions", headers=AUTH)).json())["actions"], key=lambda a: a["id"])
        assert [(a["kind"], a["state"]) for a in actions] == [("cordon", "done"), ("taint", "done"),
                                                               ("drain", "done"), ("replace", "done")]
        assert sorted(actions[2]["result"]["evicted"]) == ["ml/bare", "ml/train-0"]
        assert kube.nodes["gpu-1"]["spec"]["unschedulable"] is True
        assert sorted(kube.pods) == [("kube-system", "etcd-gpu-1"), ("kube-system", "runtimekit-agent-x"),
                                     ("ml", "elsewhere")]
        evictions = len(kube.evictions)
        resolved = alert_body(status="resolved")
        assert (await client.post("/api/v1/alerts", json=resolved, headers=AUTH)).status == 200
        await _settle(app, lambda: True)
        kinds = [a["kind"] for a in (await (await client.get("/api/v1/actions", headers=AUTH)).json())["actions"]]
        assert sorted(kinds) == ["cordon", "drain", "replace", "taint", "uncordon", "untaint"]  # no "undrain"
        assert len(kube.evictions) == evictions
    finally:
        await client.close()


async def test_drain_blocked_past_timeout_over_http_stops_the_ladder(fakes, tmp_path):
    kube, repl, url = fakes
    _populate(kube)
    kube.pdb_blocked.add(("ml", "train-0"))
    client, app = await _serve(tmp_path, url, drain={"retry_seconds": 0.02, "timeout_seconds": 0.2})
    try:
        assert (await client.post("/api/v1/alerts", json=alert_body(), headers=AUTH)).status == 200
        await _settle(app, lambda: True)
        actions = {a["kind"]: a for a in (await (await client.get("/api/v1/actions", headers=AUTH)).json())["actions"]}
        assert actions["drain"]["state"] == "failed"
        assert actions["drain"]["result"]["blocked"] == ["ml/train-0"]
        assert "ml/train-0" in actions["drain"]["result"]["error"]
        assert actions["replace"]["state"] == "skipped"
        assert repl.calls == []
        assert ("ml", "train-0") in kube.pods
    finally:
        await client.close()
