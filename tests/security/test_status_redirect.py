"""``runtimekit status`` follows no redirect: the agent never sends one, and urllib's default
handler would send the basic auth ``Authorization`` header on to whatever host the ``Location``
names (another host, https to http). A redirect is one error line naming the Location, exit 1."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.agent_process import ROOT


class Recorder(BaseHTTPRequestHandler):
    """Records the Authorization header of each GET and answers it with a node document."""

    seen: list[str | None] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = b'{"gpus": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


def redirecting_to(location: str) -> type[BaseHTTPRequestHandler]:
    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    return Redirect


@contextmanager
def serving(host: str, handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("output", [["-o", "json"], []], ids=["json", "table"])
def test_a_redirect_to_another_host_is_an_error_and_the_password_stays_home(output):
    Recorder.seen = []
    with serving("127.0.0.2", Recorder) as elsewhere:
        location = f"http://127.0.0.2:{elsewhere}/api/v1/node"
        with serving("127.0.0.1", redirecting_to(location)) as port:
            done = subprocess.run(
                [sys.executable, "-m", "runtimekit.cli", "status", "--address", f"http://127.0.0.1:{port}", *output],
                cwd=ROOT, capture_output=True, text=True, timeout=30,
                env={"PATH": "/usr/bin:/bin", "RUNTIMEKIT_USERNAME": "admin", "RUNTIMEKIT_PASSWORD": "hunter2"})
    assert Recorder.seen == []  # not even without the header: the redirect is not followed at all
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"runtimekit: error: the agent at http://127.0.0.1:{port}/api/v1/node answered a redirect (HTTP 302) to "
        f"{location}; runtimekit status follows no redirect (an agent never sends one: is --address right?)"]
