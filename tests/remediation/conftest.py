"""Fakes for the remediation tests: a Kubernetes API and a replacement endpoint on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.kube_fakes import FakeKube, FakeReplacement, serve  # noqa: F401 (re-exported to the tests)


def alert_body(fingerprint="fp1", starts="2026-01-01T00:00:00Z", status="firing", node="gpu-1",
               action="replace_node") -> dict:
    """An Alertmanager webhook body (version 4) with one alert labelled as the shipped rules label
    theirs (alerts/runtimekit.rules.yml): ``node``, ``gpu`` (index), ``uuid``, ``severity``, ``action``."""
    return {"version": "4", "status": status, "receiver": "rk", "groupKey": "{}:{}", "truncatedAlerts": 0,
            "groupLabels": {}, "commonLabels": {}, "extra": 1,
            "alerts": [{"status": status, "labels": {"alertname": "RuntimeKitGPULost", "node": node, "action": action,
                                                      "severity": "critical", "gpu": "2,3", "uuid": "GPU-a,GPU-b"},
                        "annotations": {}, "startsAt": starts, "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prom", "fingerprint": fingerprint}]}


@pytest.fixture
async def fakes(tmp_path):
    kube, repl = FakeKube(), FakeReplacement()
    kr, kurl = await serve(kube.app)
    rr, rurl = await serve(repl.app)
    (tmp_path / "kubeconfig").write_text(kube.kubeconfig(kurl))
    (tmp_path / "token").write_text("s3cret\n")
    yield kube, repl, rurl + "/replace"
    await kr.cleanup()
    await rr.cleanup()


def write_config(tmp_path, replacement_url, **extra) -> str:
    import yaml

    data = {"listen": "127.0.0.1:0", "db_path": str(tmp_path / "j.db"), "auth": {"token_file": str(tmp_path / "token")},
            "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig")},
            "replacement": {"url": replacement_url, "backoff_seconds": 0.01},
            "worker_interval_seconds": 0.05, "breaker": {"max_nodes": 10, "max_percent": 100}, **extra}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)
