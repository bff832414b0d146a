"""Files read as documents (runtimekit.documents.read_bounded: --config, the thresholds, the web
configuration file and the files it names) must be regular files: a FIFO, a device or a directory
is refused by name at once, never waited on (opening a FIFO that no one writes blocks for good)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtimekit.config import load
from runtimekit.documents import DocumentError, load_yaml_file, read_bounded
from tests.agent_process import ROOT

WAIT = 5.0  # seconds a read may take before it counts as blocked


def finishes(call: Callable[[], Any], fifo: Path | None = None) -> Any:
    """What ``call`` returns or raises, run in a thread that may take ``WAIT`` seconds; past that the
    test fails, after unblocking a read stuck opening ``fifo`` (a writer's open releases it)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(WAIT)
        pytest.fail(f"still blocked after {WAIT} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    os.mkfifo(path)
    return path


def test_a_fifo_is_refused_without_waiting_for_a_writer(fifo):
    with pytest.raises(DocumentError, match=r"config\.yaml: not a regular file \(a FIFO\)$"):
        finishes(lambda: read_bounded(fifo, what=str(fifo)), fifo)


def test_a_symbolic_link_to_a_fifo_is_refused_and_one_to_a_file_is_read(fifo, tmp_path):
    (tmp_path / "to-fifo").symlink_to(fifo)
    with pytest.raises(DocumentError, match=r"not a regular file \(a FIFO\)"):
        finishes(lambda: read_bounded(tmp_path / "to-fifo", what="to-fifo"), fifo)
    (tmp_path / "real.yaml").write_text("a: 1\n")
    (tmp_path / "to-file").symlink_to(tmp_path / "real.yaml")
    assert load_yaml_file(tmp_path / "to-file", what="to-file") == {"a": 1}


@pytest.mark.parametrize("path,kind", [("/dev/null", "a character device"), (".", "a directory")],
                         ids=["device", "directory"])
def test_a_device_or_a_directory_is_refused_by_its_kind(tmp_path, path, kind):
    target = tmp_path if path == "." else Path(path)
    with pytest.raises(DocumentError, match=rf"not a regular file \({kind}\)"):
        finishes(lambda: read_bounded(target, what=str(target)))


def test_a_path_with_a_nul_byte_is_a_document_error_not_a_value_error(tmp_path):
    with pytest.raises(DocumentError, match="holds a NUL byte"):
        read_bounded(f"{tmp_path}/a\0b", what="x")


def test_the_agents_configuration_file_as_a_fifo_names_the_flag(fifo):
    with pytest.raises(ValueError, match=r"^--config: .*config\.yaml: not a regular file \(a FIFO\)$"):
        finishes(lambda: load(fifo), fifo)


def test_the_web_configuration_file_as_a_fifo_names_its_key(fifo):
    with pytest.raises(ValueError, match=r"^listener\.web_config_file: .*: not a regular file \(a FIFO\)$"):
        finishes(lambda: load(None, {"listener.web_config_file": str(fifo)}), fifo)


@pytest.mark.parametrize("as_web_config", [False, True], ids=["--config", "web_config_file"])
def test_the_agent_stops_at_once_with_one_line_and_exit_2(tmp_path, fifo, as_web_config):
    config = tmp_path / "agent.yaml"
    config.write_text(f"listener: {{web_config_file: {fifo}}}\n")
    command = [sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--listen", "127.0.0.1:0",
               "--state-dir", str(tmp_path / "state"), "--config", str(config if as_web_config else fifo)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "not a regular file (a FIFO)" in done.stderr.strip().splitlines()[-1]
