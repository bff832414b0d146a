"""The shipped Alertmanager configuration is valid and routes node-replacing GPU alerts to the
remediation webhook (amtool, from Debian's prometheus-alertmanager)."""

import shutil
import subprocess

import pytest

from tests.agent_process import ROOT

CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
pytestmark = pytest.mark.tool("amtool")  # missing: fails under CI, skips elsewhere (tests/conftest.py)


def amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("amtool") or "/usr/bin/amtool", *args], capture_output=True, text=True,
                          timeout=60)


def test_amtool_accepts_the_configuration():
    done = amtool("check-config", str(CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr


def test_critical_node_alerts_reach_the_remediation_webhook_and_others_do_not():
    def receivers(*labels: str) -> str:
        done = amtool("config", "routes", "test", f"--config.file={CONFIG}", *labels)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    # node-replacing alerts reach the webhook AND the people on call (a matching child route hides
    # the parent's receiver, so on-call must be a route of its own)
    assert receivers("severity=critical", "action=replace_node", "alertname=RuntimekitGpuLost") == "gpu-remediation,on-call"
    assert receivers("severity=critical", "action=reboot_node") == "gpu-remediation,on-call"
    assert receivers("severity=warning", "action=drain_and_reset_gpu") == "on-call"
    assert receivers("severity=critical", "action=restart_application") == "on-call"
