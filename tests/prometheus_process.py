"""A real Debian ``prometheus`` on loopback for tests: start it on a configuration, query it, stop it."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.agent_process import free_port
from tests.conftest import require_tool


def scrape_config(target: str, *, node: str = "sim-node-1", rule_files: list[str] | None = None,
                  alertmanager: str | None = None) -> dict[str, Any]:
    """Prometheus's configuration: one ``runtimekit`` job scraping ``target`` (HOST:PORT) every second,
    with the ``node`` label a real scrape configuration adds; rules evaluated every second."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "runtimekit", "honor_labels": True,
                            "static_configs": [{"targets": [target], "labels": {"node": node}}]}],
    }
    if rule_files:
        config["rule_files"] = rule_files
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


@contextmanager
def prometheus(folder: Path, config: dict[str, Any]) -> Iterator[str]:
    """Run Prometheus on ``config`` with its data under ``folder``; yields its URL, stops it after."""
    binary = require_tool("prometheus")
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    server = subprocess.Popen(
        [binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(folder / "prometheus.log", "w"),
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


def query(url: str, expr: str) -> list:
    """The result vector of an instant query (raises OSError while Prometheus is not up yet)."""
    address = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(address, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def wait_for_scrapes(url: str, folder: Path, count: int, timeout: float = 60.0) -> None:
    """Wait until Prometheus has scraped the runtimekit job ``count`` times in the last minute."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if query(url, f'count_over_time(up{{job="runtimekit"}}[1m]) >= {count}'):
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError((folder / "prometheus.log").read_text()[-3000:])
