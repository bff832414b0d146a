"""``runtimekit status``: the frame drawn from a hand-built node document, then the command against a
real agent on the simulated DGX H100 (one-shot, ``-o json``, ``--watch`` bounded by ``--iterations``)
and against an address where nothing listens."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from exporter_factories import SAMPLED_AT
from statuspage_factories import SLICE_ID, make_node, serving_json

from runtimekit.cli import main
from runtimekit.status_frame import render
from runtimekit.statuspage import render_node
from tests.agent_process import ROOT, Agent, free_port, start_agent, without_pods


def document() -> dict:
    return render_node(make_node().view(), node="test node", version="9.9.9", now=SAMPLED_AT + 0.9)  # fresh


def test_the_frame_shows_gpus_health_faults_slices_and_top_processes():
    frame = render(document(), top=5)
    lines = frame.splitlines()
    assert lines[0] == ("runtimekit 9.9.9 on test node: node unhealthy, ready, 2 GPUs, driver 550.54.15, "
                        "sample 0.9 s old, attribution 0.4 s old")
    header, first, second = lines[2:5]
    assert header.split()[:4] == ["GPU", "MODEL", "HEALTH", "UTIL"]
    assert first.split()[:5] == ["0", "NVIDIA", "H100", "80GB", "HBM3"] and "healthy" in first
    assert "[########--]  75%" in first and "10.0/80.0 GiB" in first and "41 C" in first and "312/700 W" in first
    assert "unhealthy" in second and "n/a" in second
    assert any(line.startswith("  GPU 1: xid_79 (critical, reboot_node): XID 79") for line in lines)
    [slice_row] = [line for line in lines if line.startswith(SLICE_ID)]
    assert slice_row.split() == [SLICE_ID, "0", "tdm", "ready", "healthy", "30%", "/", "50%", "1.0", "/", "2.0", "GiB", "me"]
    top = lines.index("TOP PROCESSES (by GPU memory, 1 of 1 listed)")
    assert lines[top + 2].split() == ["0", "4242", "python3", "9.0", "GiB", "60%", "ml/trainer-0/main"]
    assert "\x1b[" not in frame


def test_colour_marks_health_states_without_skewing_columns():
    plain, coloured = render(document()), render(document(), colour=True)
    assert "\x1b[31munhealthy" in coloured and "\x1b[32mhealthy" in coloured
    stripped = coloured
    for code in ("\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[2m", "\x1b[0m"):
        stripped = stripped.replace(code, "")
    assert stripped == plain


EVIL = "evil\x1b]0;pwned\x07\x1b[2J\u202e\nnext"  # a window title, a screen clear, a bidi override, a new line


def test_text_from_the_node_cannot_drive_the_terminal():
    hostile = document()
    hostile["agent"]["node"] = EVIL
    gpu = hostile["gpus"][0]
    gpu["name"] = EVIL
    gpu["processes"] = [{"pid": 1, "name": EVIL, "used_memory_bytes": 1 << 30, "sm_utilization": 0.5, "container": EVIL}]
    hostile["gpus"][1]["health"]["faults"][0]["evidence"] = EVIL
    hostile["slices"][0]["owner"] = EVIL
    for colour in (False, True):
        frame = render(hostile, colour=colour)
        for code in ("\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[2m", "\x1b[0m"):
            frame = frame.replace(code, "")  # the colours render adds itself
        assert not [char for char in frame if not char.isprintable() and char != "\n"]
        assert frame.count("evil\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x0anext") == 6
    header, first = render(hostile).splitlines()[2:4]
    assert first.index("healthy") == header.index("HEALTH")  # the columns still line up


class HostileReason(BaseHTTPRequestHandler):
    """Answers every GET with an error whose reason phrase carries escape sequences."""

    def do_GET(self) -> None:
        self.send_response(418, "\x1b]0;pwned\x07\x1b[2J")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def test_an_error_from_the_agent_cannot_drive_the_terminal(capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostileReason)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert main(["status", "--address", f"127.0.0.1:{server.server_port}"]) == 1
        assert main(["status", "--address", f"127.0.0.1:{server.server_port}", "--watch", "--iterations", "1"]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert err.count("answered HTTP 418 \\x1b]0;pwned\\x07\\x1b[2J") == 2


@pytest.fixture(scope="module")
def agent(tmp_path_factory) -> Iterator[Agent]:
    folder = tmp_path_factory.mktemp("status")
    agent = start_agent(folder, "--sim", without_pods("dgx-h100", folder), "--interval", "0.5")
    yield agent
    agent.stop()


@pytest.fixture(scope="module")
def slice_id(agent) -> str:
    """A TDM slice on GPU 6, made with ``runtimekit slice create``."""
    state_dir = agent.log_path.parent / "state"
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "slice", "create", "--state-dir", str(state_dir),
                           "--mode", "tdm", "--compute", "25", "--memory", "1GiB", "--device", "6", "--owner", "cli-test",
                           "-o", "json"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["id"]


def test_one_shot_against_a_real_agent(agent, slice_id):
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "status", "--address", agent.url, "--top", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("runtimekit ") and "simulated node dgx-h100" in lines[0] and "8 GPUs" in lines[0]
    gpu_rows = lines[3:11]
    assert [row.split()[0] for row in gpu_rows] == [str(n) for n in range(8)]
    assert all("NVIDIA H100 80GB HBM3" in row and " healthy " in row for row in gpu_rows)
    [slice_row] = [line for line in lines if line.startswith(slice_id)]
    assert slice_row.split()[1:4] == ["6", "tdm", "ready"] and slice_row.endswith("cli-test")
    assert "TOP PROCESSES (by GPU memory, 3 of" in done.stdout


def test_json_is_the_agents_document(agent, slice_id, capsys):
    assert main(["status", "--address", agent.url.removeprefix("http://"), "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["gpus"]) == 8 and [s["id"] for s in document["slices"]] == [slice_id]
    assert document["agent"]["sample_interval_seconds"] == 0.5  # the agent's own (--interval 0.5), not the default


def test_watch_draws_again_every_interval(agent, capsys):
    assert main(["status", "--address", agent.url, "--watch", "--interval", "0.2", "--iterations", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("every 0.2 s, at ") == 3 and out.count("runtimekit 0.1.0 on simulated node dgx-h100") == 3
    assert "\x1b[" not in out  # not a terminal: no clearing, no colours


def test_an_unreachable_agent_is_one_line_and_exit_1(capsys):
    address = f"127.0.0.1:{free_port()}"
    assert main(["status", "--address", address]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"runtimekit: error: cannot reach the agent at http://{address}/api/v1/node: ")
    assert len(err.splitlines()) == 1
    assert main(["status", "--address", address, "--watch", "--interval", "0.1", "--iterations", "2"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("cannot reach the agent") == 2
    first, last = err.splitlines()
    assert first.endswith("; trying again in 0.1 s") and "trying again" not in last  # the last frame is the last


def test_something_that_is_not_an_agent_is_named(agent, capsys):
    assert main(["status", "--address", agent.url + "/metrics"]) == 1
    assert "answered HTTP 404" in capsys.readouterr().err


def test_a_document_it_cannot_draw_is_one_line_not_a_traceback(capsys):
    with serving_json(b'{"gpus": [{"no index": true}]}') as address:  # another program, or version
        assert main(["status", "--address", address]) == 1
    err = capsys.readouterr().err
    assert "answered a document this command cannot draw (KeyError" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("flag, value, rule", [
    ("--interval", "0", "above 0"), ("--iterations", "0", "1 or more"), ("--top", "many", "whole number"),
    ("--timeout", "1e10", "at most 86400"), ("--interval", "1e300", "at most 86400"),
    ("--address", "http://[::1", "must be an http(s) URL or HOST:PORT (Invalid IPv6 URL)"),
    ("--address", "http://127.0.0.1:abc", "must be an http(s) URL or HOST:PORT"),
    ("--address", "127.0.0.1:99999", "Port out of range"),
    ("--address", "http://127.0.0.1:9445/\n", "must not hold control characters, got 'http://127.0.0.1:9445/\\x0a'"),
    ("--address", "ftp://x", "must be an http:// or https:// URL"),
    ("--address", "http://:9445", "must name a host"),
    ("--address", "http://h:9445/?x=1", "must not hold a query or fragment"),
])
def test_bad_flags_exit_2_naming_the_flag(flag, value, rule, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["status", flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and rule in err


def test_credentials_in_the_address_are_refused_without_being_echoed(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["status", "--address", "http://admin:s3cret@127.0.0.1:9445"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "must not hold credentials (set RUNTIMEKIT_USERNAME and RUNTIMEKIT_PASSWORD)" in err
    assert "s3cret" not in err


def test_iterations_without_watch_is_refused(capsys):
    assert main(["status", "--iterations", "3", "--address", f"127.0.0.1:{free_port()}"]) == 2
    assert capsys.readouterr().err == "runtimekit status: error: --iterations: only with --watch\n"
