"""A journal another process holds locked: a clear error and exit 1 at start (within seconds, not
after a minute), and while running 503 with a message for the webhook and not-ready on /readyz,
never a 500 with a traceback; all of it recovers when the lock is released."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer
from conftest import AUTH, alert_body, write_config

from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.journal import Journal
from runtimekit.kube.remediation.server import JOURNAL, make_app
from tests.agent_process import ROOT


def _hold_write_lock(path) -> sqlite3.Connection:
    """Another process's writer (a second service, a person with sqlite3) holding the journal."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    return conn


def test_a_locked_journal_at_start_is_one_line_and_exit_1(fakes, tmp_path):
    config = write_config(tmp_path, fakes[2])
    Journal(tmp_path / "j.db").close()
    holder = _hold_write_lock(tmp_path / "j.db")
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "runtimekit.kube.remediation", "serve", "--config", config],
                              cwd=ROOT, capture_output=True, text=True, timeout=30)
        elapsed = time.monotonic() - started
    finally:
        holder.close()
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"runtimekit: db_path: the journal {tmp_path / 'j.db'} is locked by another process")
    assert elapsed < 25  # a bounded wait, not the minute sqlite's default retries took


@pytest.fixture
async def client(fakes, tmp_path):
    client = TestClient(TestServer(make_app(load(write_config(tmp_path, fakes[2], action_delay_seconds=3600)))))
    await client.start_server()
    yield client
    await client.close()


async def test_a_journal_locked_while_running_answers_503_and_is_not_ready(client, tmp_path, caplog):
    assert (await client.get("/readyz")).status == 200
    holder = _hold_write_lock(tmp_path / "j.db")
    try:
        response = await client.post("/api/v1/alerts", json=alert_body(), headers=AUTH)
        assert response.status == 503
        assert "journal" in (await response.json())["error"] and "Retry-After" in response.headers
        ready = await client.get("/readyz")
        assert ready.status == 503 and "journal" in await ready.text()
        assert (await client.get("/healthz")).status == 200  # alive: a restart would not help
        assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    finally:
        holder.close()
    assert (await client.get("/readyz")).status == 200
    assert (await client.post("/api/v1/alerts", json=alert_body(), headers=AUTH)).status == 200
    assert client.server.app[JOURNAL].snapshot() == (1, 3)
    metrics = await (await client.get("/metrics", headers=AUTH)).text()
    assert 'runtimekit_remediation_requests_rejected_total{code="503"} 1' in metrics
