"""One service per journal: a second ``remediate serve`` on the same db_path is refused at start
(exit 1, one line naming the first one's pid), so two workers never run the same pending actions;
the lock dies with its process, so a restart after a stop or a SIGKILL is not refused."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

from conftest import alert_body, post_alert, start_service, stop_service, write_config

from tests.agent_process import ROOT, free_port


def _serve(config: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtimekit.kube.remediation", "serve", "--config", config],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)


async def test_a_second_service_on_the_same_journal_exits_1_naming_the_first(fakes, tmp_path):
    url = fakes[2]
    port = free_port()
    first = await start_service(write_config(tmp_path, url, listen=f"127.0.0.1:{port}", action_delay_seconds=3600), port)
    try:
        second = await asyncio.to_thread(_serve, write_config(tmp_path, url, listen=f"127.0.0.1:{free_port()}"))
        assert second.returncode == 1, second.stderr
        assert "Traceback" not in second.stderr and second.stderr.count("\n") == 1, second.stderr
        journal = tmp_path / "j.db"
        assert second.stderr.startswith(f"runtimekit: db_path: the journal {journal} is in use by another "
                                        f"remediation service (pid {first.pid} on {socket.gethostname()}, lock {journal}.lock)"), second.stderr
        assert await post_alert(port, alert_body()) == 200  # the first one serves on
    finally:
        await stop_service(first)
    for kill in (False, True):  # the lock went with the process, stopped or killed
        again = await start_service(write_config(tmp_path, url, listen=f"127.0.0.1:{port}"), port)
        await stop_service(again, kill=kill)
