"""Every dashboard panel's query returns data from a real Prometheus scraping a simulated agent.

Debian's ``prometheus`` runs as a real process on loopback, scraping ``runtimekit serve --sim
dgx-a100`` (GPUs 0 and 1 in MIG mode) every second with the target label ``node`` a scrape
configuration adds (the agent never labels its series with a host name). A thermal slowdown and an
XID are injected first so that the fault, XID and transition panels have something to show, as on a
node that has seen trouble; a TDM slice owned by a pod's container and a MIG slice, each with a
process using memory, give the slices dashboard its quota and use.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from runtimekit.client import inject_remote, request_json
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
    agent = start_agent(folder, "--sim", "dgx-a100", "--interval", "0.5", "--sim-pods", "4",
                        "--sim-processes", "8", "--seed", "5")
    try:
        with prometheus_process(folder, scrape_config(agent.url.removeprefix("http://"))) as url:
            inject_remote(agent.url, 3, "thermal-slowdown", {})
            inject_remote(agent.url, 2, "xid", {"xid": 13})
            request_json("POST", agent.url + "/sim/v1/pods", {  # a GPU allocated and never used
                "namespace": "dev", "name": "idle-notebook", "containers": [{"name": "nb", "gpus": [7], "idle": True}]})
            _make_slices(agent.url, folder / "state")
            wait_for_scrapes(url, folder, 12)  # a dozen scrapes: enough for rate() and increase()
            yield url
    finally:
        agent.stop()


def _slice(state_dir, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "slice", "create", *args, "--state-dir",
                           str(state_dir), "-o", "json"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _make_slices(agent_url: str, state_dir) -> None:
    """A TDM slice of a pod's container, with a process of that container on its card, and a MIG
    slice with a process in its instance."""
    def busy(c: dict) -> bool:
        return bool(c["devices"]) and not c["idle"]

    pod = next(p for p in request_json("GET", agent_url + "/sim/v1/pods")["pods"] if any(map(busy, p["containers"])))
    container = next(c for c in pod["containers"] if busy(c))
    uuid = container["devices"][0]["device_id"]
    tdm = _slice(state_dir, "--mode", "tdm", "--compute", "10", "--memory", "1GiB", "--device", uuid,
                 "--pod-uid", pod["uid"], "--container", container["name"])
    owner = {"namespace": pod["namespace"], "pod": pod["name"], "container": container["name"]}
    request_json("POST", agent_url + "/sim/v1/processes",
                 {"gpu": tdm["device"]["index"], "used_memory_bytes": 512 << 20, **owner})
    mig = _slice(state_dir, "--mode", "mig", "--memory", "10GiB", "--owner", "dashboards")
    request_json("POST", agent_url + "/sim/v1/processes",
                 {"gpu": mig["device"]["index"], "used_memory_bytes": 256 << 20,
                  "gpu_instance": mig["partition"]["gpu_instance_id"],
                  "compute_instance": mig["partition"]["compute_instance_id"]})


def panels():
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                yield pytest.param(target["expr"], id=f"{path.stem}/{panel['title']}/{target['refId']}")


def test_there_are_dashboards_with_the_variables_operators_filter_by():
    assert {p.stem for p in DASHBOARDS} >= {"runtimekit-cluster", "runtimekit-node", "runtimekit-pods",
                                           "runtimekit-health", "runtimekit-slices"}
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[:1] == ["datasource"] and {"node", "gpu", "namespace", "pod"} <= set(names), path.name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", (path.name, panel["title"])


@pytest.mark.parametrize("expr", list(panels()))
def test_every_panel_query_returns_data(prometheus, expr):
    found = query(prometheus, substitute(expr))  # Prometheus parses it either way: a typo fails here
    assert found, f"no data for: {expr}"


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
