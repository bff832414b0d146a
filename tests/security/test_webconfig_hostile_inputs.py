"""A web configuration file that breaks a rule in an unusual way is still one error naming the key,
at start and on a reload: Unicode digits where ASCII ones belong, an encrypted key, a NUL byte in a
path, a FIFO in place of the file or of a certificate. A reload never raises, never blocks the event
loop, and fails closed (logged once) until the file is usable again (docs/security.md)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from runtimekit.config import ListenerConfig
from runtimekit.listener import listening
from runtimekit.webconfig import WebConfigError, WebConfigSource, load_web_config
from runtimekit.webconfig import source as source_module
from runtimekit.webconfig.model import parse_duration
from tests.agent_process import ROOT
from tests.security.pki import write_web_config

HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"  # exporter-toolkit's documented example
ARABIC_COST = HASH.replace("$10$", "$\u0661\u0660$")  # ١٠: Unicode digits that \d matches
REFUSING = "refusing connections and requests"


def _users(path: Path, hashed: str) -> Path:
    path.write_text(yaml.safe_dump({"basic_auth_users": {"admin": hashed}}, allow_unicode=True))
    return path


def test_a_cost_in_unicode_digits_is_not_a_bcrypt_hash(tmp_path):
    with pytest.raises(WebConfigError, match=r"^k: .*basic_auth_users\.admin: must be a bcrypt hash"):
        load_web_config(str(_users(tmp_path / "web.yml", ARABIC_COST)), "k")


@pytest.mark.parametrize("text", ["\u0661s", "1\u0660ms", "\u0665m"])
def test_a_duration_in_unicode_digits_is_not_a_duration(text):
    assert parse_duration(text) is None


def test_a_reload_to_unicode_digits_fails_closed_naming_the_key(tmp_path, caplog):
    source = WebConfigSource(str(_users(tmp_path / "web.yml", HASH)), "listener.web_config_file")
    assert source.current().error is None
    _users(tmp_path / "web.yml", ARABIC_COST)
    loaded = source.current()
    assert loaded.config is None
    assert loaded.error is not None and "basic_auth_users.admin: must be a bcrypt hash" in loaded.error


def test_a_reload_turns_any_failure_into_a_refusal_never_an_exception(tmp_path, monkeypatch, caplog):
    source = WebConfigSource(str(_users(tmp_path / "web.yml", HASH)), "k")

    def broken(path: str, key: str) -> None:
        raise UnicodeEncodeError("ascii", "\u0661", 0, 1, "ordinal not in range(128)")

    monkeypatch.setattr(source_module, "read_web_config", broken)
    _users(tmp_path / "web.yml", HASH.replace("X0h1", "Y0h1"))
    loaded = source.current()
    assert loaded.config is None and loaded.error is not None
    assert loaded.error.startswith("k: ") and "UnicodeEncodeError" in loaded.error
    assert sum(REFUSING in r.getMessage() for r in caplog.records) == 1
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]


def test_a_nul_byte_in_a_path_names_the_key(pki, tmp_path):
    (tmp_path / "web.yml").write_text(yaml.safe_dump({"tls_server_config": {
        "cert_file": str(pki / "server.pem") + "\0", "key_file": str(pki / "server.key")}}))
    with pytest.raises(WebConfigError, match=r"tls_server_config\.cert_file: must be a path"):
        load_web_config(str(tmp_path / "web.yml"), "k")


def test_empty_paths_still_mean_no_tls_as_in_exporter_toolkit(tmp_path):
    (tmp_path / "web.yml").write_text('tls_server_config: {cert_file: "", key_file: ""}\n')
    config, context = load_web_config(str(tmp_path / "web.yml"), "k")
    assert config.tls is None and context is None


@pytest.fixture
def encrypted_key(pki, tmp_path, require_tool) -> Path:
    key = tmp_path / "encrypted.key"
    subprocess.run([require_tool("openssl", "openssl"), "pkey", "-in", str(pki / "server.key"), "-aes256",
                    "-passout", "pass:secret", "-out", str(key)], check=True, capture_output=True)
    return key


def test_an_encrypted_key_is_refused_by_name_without_asking_for_a_pass_phrase(pki, tmp_path, encrypted_key):
    write_web_config(tmp_path / "web.yml", pki, key_file=str(encrypted_key))
    with pytest.raises(WebConfigError, match=r"^k: .*tls_server_config\.key_file: .*encrypted\.key is encrypted"):
        load_web_config(str(tmp_path / "web.yml"), "k")


def test_the_agent_with_an_encrypted_key_stops_with_one_line(pki, tmp_path, encrypted_key):
    write_web_config(tmp_path / "web.yml", pki, key_file=str(encrypted_key))
    (tmp_path / "agent.yaml").write_text(f"listener: {{web_config_file: {tmp_path / 'web.yml'}}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--listen", "127.0.0.1:0",
         "--state-dir", str(tmp_path / "state"), "--config", str(tmp_path / "agent.yaml")],
        cwd=ROOT, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, start_new_session=True)
    assert done.returncode == 2, done.stderr
    assert "pass phrase:" not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert "listener.web_config_file: " in done.stderr and "key_file" in done.stderr and "is encrypted" in done.stderr


class Unblocker:
    """Opens ``fifo`` for writing every ``seconds`` until stopped: releases a reader stuck opening it
    (the old behaviour), so that a test fails on its timing rather than hanging."""

    def __init__(self, fifo: Path, seconds: float) -> None:
        self._fifo, self._seconds, self._stop = fifo, seconds, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._seconds):
            try:
                os.close(os.open(self._fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass  # no reader waiting: nothing is blocked

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_a_certificate_replaced_by_a_fifo_is_refused_without_blocking(pki, tmp_path):
    fifo = tmp_path / "server.pem"
    os.mkfifo(fifo)
    write_web_config(tmp_path / "web.yml", pki, cert_file=str(fifo))
    unblocker, started = Unblocker(fifo, 2.0), time.monotonic()
    try:
        with pytest.raises(WebConfigError, match=r"tls_server_config\.cert_file: .*server\.pem: not a regular file"):
            load_web_config(str(tmp_path / "web.yml"), "k")
    finally:
        unblocker.stop()
    assert time.monotonic() - started < 3


async def _status(url: str) -> int | None:
    """The status of GET ``url`` on a new connection; None when the connection is refused."""
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status
    except aiohttp.ClientError:
        return None


async def test_the_file_swapped_for_a_fifo_while_serving_fails_closed_and_the_loop_runs_on(tmp_path, caplog):
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/healthz", ok)
    web_config = write_web_config(tmp_path / "web.yml")  # plain HTTP, no users: {}
    async with listening(app, "127.0.0.1", 0, ListenerConfig(web_config_file=str(web_config))) as listener:
        url = listener.address + "/healthz"
        assert await _status(url) == 200
        web_config.rename(tmp_path / "web.bak")
        os.mkfifo(web_config)
        unblocker, started = Unblocker(web_config, 2.0), time.monotonic()
        try:
            assert [await _status(url), await _status(url)] == [None, None]  # refused while unusable
        finally:
            unblocker.stop()
        assert time.monotonic() - started < 1.5, "the event loop was blocked opening the FIFO"
        refusals = [r.getMessage() for r in caplog.records if REFUSING in r.getMessage()]
        assert len(refusals) == 1 and "not a regular file (a FIFO)" in refusals[0]
        web_config.unlink()
        (tmp_path / "web.bak").rename(web_config)
        assert await _status(url) == 200
