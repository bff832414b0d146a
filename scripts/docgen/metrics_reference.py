"""docs/reference/metrics.md: every metric family the node agent emits, with its type, labels and
HELP text, grouped by the collector that builds it (``exporter.collectors`` switches them).

The families are recorded, not listed by hand: a real agent (``runtimekit serve``) runs on the
simulated ``dgx-a100`` node under ``metrics_probe``, which records each family as a collector
builds it -- empty ones included, so no family depends on what the node happens to show. The run
makes what some families need a sample of to show their label names: a MIG slice (MIG devices), a
TDM slice, GPU processes in pods with command lines exported, RDMA NICs (topology). Every family
of the agent's last exposition must have been recorded, or the generator stops naming it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtimekit.exporter.registry import COLLECTORS

from .markdown import code, generated_header, table

SCENARIO = "dgx-a100"  # GPUs 0 and 1 in MIG mode, RDMA NICs, NVLink: every collector has something
READY_SECONDS = 90.0
SCRIPTS = Path(__file__).resolve().parents[1]
# What the run asks of the agent once it is ready (runtimekit.v1 over its socket), so that every
# family has a sample: a MIG partition (runtimekit_gpu_mig_device_info) and a TDM share (slices),
# the share on GPU 7 once the scenario's pod holding it whole is gone (FREED: namespace, name).
FREED = ("inference", "triton-0")
SLICES = (
    ("--mode", "mig", "--device", "0", "--profile", "1g.10gb", "--owner", "docgen-mig"),
    ("--mode", "tdm", "--device", "7", "--memory", "4GiB", "--compute", "25", "--owner", "docgen-tdm"),
)
NEEDED = ("runtimekit_slice_info", "runtimekit_gpu_mig_device_info", "runtimekit_process_info")


def collect_catalogue() -> dict[str, dict[str, Any]]:
    """Exposed family name -> {type, help, labels, collector}, from one run of the agent."""
    with tempfile.TemporaryDirectory(prefix="rk-docgen-") as scratch:
        root = Path(scratch)
        catalogue, log = root / "catalogue.json", root / "agent.log"
        (root / "runtimekit.yaml").write_text("exporter: {process_cmdline: true}\n")
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "docgen.metrics_probe", str(catalogue), "serve", "--sim", SCENARIO, "--seed", "1",
                   "--config", str(root / "runtimekit.yaml"), "--listen", f"127.0.0.1:{port}", "--state-dir",
                   str(root / "state"), "--sim-processes", "8", "--sim-pods", "2", "--log-level", "warning"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")]))}
        with log.open("wb") as output:
            agent = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        try:
            _wait(lambda: _get(url + "/readyz")[0] == 200, agent, log, "ready")
            _runtimekit(["sim", "pod", "delete", "--agent", url, "--namespace", FREED[0], "--name", FREED[1]])
            _wait(lambda: f'pod="{FREED[1]}"' not in _get(url + "/metrics")[1], agent, log, f"rid of pod {FREED[1]}")
            for arguments in SLICES:
                _runtimekit(["slice", "create", "--socket", str(root / "state" / "runtimekit.sock"), *arguments])
            _wait(lambda: all(f"# TYPE {name} " in _get(url + "/metrics")[1] for name in NEEDED), agent, log,
                  "exposing " + ", ".join(NEEDED))
            exposed = _families_of(_get(url + "/metrics")[1])
        finally:
            agent.terminate()
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        recorded: dict[str, dict[str, Any]] = json.loads(catalogue.read_text())
    missed = sorted(set(exposed) - set(recorded))
    if missed:
        raise RuntimeError(f"docgen: the agent exposed families no collector was seen building: {', '.join(missed)}")
    return recorded


def render(catalogue: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    families = dict(catalogue if catalogue is not None else collect_catalogue())
    lines = generated_header("Metrics reference", "the families a running agent's collectors build (exporter/)")
    lines += [
        f"Every metric family the node agent (`runtimekit serve`) can emit: {len(families)} families, recorded as the "
        "collectors build them on a simulated node. A family appears in `/metrics` while it has a sample: a GPU "
        "reading its driver does not support, a lost GPU, a card without slices leave theirs out rather than "
        "exporting 0. Names are those of the exposition (counters end in `_total`, identity families in `_info`, "
        "whose value is always 1); no series names its host: the scrape adds the node (docs/runbooks.md, "
        "\"Conventions\"). Meanings, units and sources: [docs/metrics.md](../metrics.md), "
        "[docs/health.md](../health.md).",
        "",
        "Each collector can be switched off with `exporter.collectors: {NAME: false}` "
        "([configuration reference](configuration.md#exporter)).",
    ]
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for name, family in families.items():
        groups.setdefault(family["collector"], []).append((name, family))
    unknown = sorted(set(groups) - set(COLLECTORS) - {"exposition"})
    if unknown:
        raise RuntimeError(f"docgen: families built outside any registered collector: {unknown}")
    for collector in [*COLLECTORS, "exposition"]:
        if collector not in groups:
            continue
        if collector == "exposition":
            lines += ["", "## The exposition itself", "",
                      "Built with every render, whichever collectors are enabled."]
        else:
            spec = COLLECTORS[collector]
            state = "on" if spec.enabled_by_default else "off"
            lines += ["", f"## Collector `{collector}`", "", f"{spec.description[0].upper()}{spec.description[1:]} "
                      f"(default: {state})."]
        lines.append("")
        lines += table(("Family", "Type", "Labels", "Help"),
                       ((code(name), family["type"], ", ".join(family["labels"]) or "-", family["help"])
                        for name, family in groups[collector]))
    return "\n".join(lines) + "\n"


def _families_of(text: str) -> list[str]:
    return [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]


def _runtimekit(arguments: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", *arguments], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"docgen: runtimekit {' '.join(arguments)}: exit {done.returncode}: {done.stderr.strip()}")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except OSError:
        return 0, ""


def _wait(condition: Any, agent: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            raise RuntimeError(f"docgen: the agent exited ({agent.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if condition():
            return
        time.sleep(0.2)
    raise RuntimeError(f"docgen: the agent was not {what} after {READY_SECONDS:.0f} s:\n{log.read_text()[-3000:]}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
