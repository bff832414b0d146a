"""Every dashboard panel's query returns data from a real Prometheus scraping a simulated agent.

Debian's ``prometheus`` runs as a real process on loopback, scraping ``runtimekit serve --sim
dgx-h100`` every second with the target label ``node`` a scrape configuration adds (the agent never
labels its series with a host name). A thermal slowdown and an XID are injected first so that the
fault, XID and transition panels have something to show, as on a node that has seen trouble.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from runtimekit.client import inject_remote
from tests.agent_process import ROOT, start_agent
from tests.prometheus_process import prometheus as prometheus_process
from tests.prometheus_process import query, scrape_config, wait_for_scrapes

DASHBOARDS = sorted((ROOT / "dashboards" / "grafana").glob("*.json"))
VARIABLES = {"$node": ".*", "$gpu": ".*", "$namespace": ".*", "$pod": ".*",
             "$__rate_interval": "10s", "$__range": "2m"}


def substitute(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(name, value)
    return expr


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dashboards")
    agent = start_agent(folder, "--sim", "dgx-h100", "--interval", "0.5", "--sim-pods", "4",
                        "--sim-processes", "8", "--seed", "5")
    try:
        with prometheus_process(folder, scrape_config(agent.url.removeprefix("http://"))) as url:
            inject_remote(agent.url, 1, "thermal-slowdown", {})
            inject_remote(agent.url, 2, "xid", {"xid": 13})
            wait_for_scrapes(url, folder, 12)  # a dozen scrapes: enough for rate() and increase()
            yield url
    finally:
        agent.stop()


def panels():
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                yield pytest.param(target["expr"], id=f"{path.stem}/{panel['title']}/{target['refId']}")


def test_there_are_dashboards_with_the_variables_operators_filter_by():
    assert {p.stem for p in DASHBOARDS} >= {"runtimekit-cluster", "runtimekit-node", "runtimekit-pods",
                                           "runtimekit-health"}
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[:1] == ["datasource"] and {"node", "gpu", "namespace", "pod"} <= set(names), path.name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", (path.name, panel["title"])


@pytest.mark.parametrize("expr", list(panels()))
def test_every_panel_query_returns_data(prometheus, expr):
    assert query(prometheus, substitute(expr)), f"no data for: {expr}"


def test_every_variable_query_lists_values(prometheus):
    for path in DASHBOARDS:
        for variable in json.loads(path.read_text())["templating"]["list"]:
            if variable["type"] != "query":
                continue
            inner = variable["query"]["query"].removeprefix("label_values(").removesuffix(")")
            selector, _, label = inner.rpartition(",")
            url = f"{prometheus}/api/v1/label/{label.strip()}/values?" + urllib.parse.urlencode(
                {"match[]": substitute(selector.strip())})
            with urllib.request.urlopen(url, timeout=10) as response:
                assert json.load(response)["data"], (path.name, variable["name"])


def test_the_files_are_what_the_generator_writes(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate", ROOT / "dashboards" / "grafana" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    for uid, (title, panels) in generate.DASHBOARDS.items():
        written = json.loads((ROOT / "dashboards" / "grafana" / f"{uid}.json").read_text())
        assert written == generate.dashboard(uid, title, panels), f"run dashboards/grafana/generate.py ({uid})"
