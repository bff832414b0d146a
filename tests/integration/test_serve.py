"""A real ``runtimekit serve`` process, scraped over HTTP and checked with promtool."""

from __future__ import annotations

import ctypes.util
import gzip
import signal
import subprocess
import sys
import time

import pytest

from tests.agent_process import ROOT, free_port, parse_samples, start_agent

SCENARIOS = ["dgx-h100", "dgx-a100", "hgx-h200"]

CARD_FAMILIES = [
    "runtimekit_gpu_info", "runtimekit_gpu_utilization_ratio", "runtimekit_gpu_memory_utilization_ratio",
    "runtimekit_gpu_encoder_utilization_ratio", "runtimekit_gpu_decoder_utilization_ratio",
    "runtimekit_gpu_memory_used_bytes", "runtimekit_gpu_memory_free_bytes", "runtimekit_gpu_memory_total_bytes",
    "runtimekit_gpu_memory_reserved_bytes", "runtimekit_gpu_bar1_used_bytes", "runtimekit_gpu_temperature_celsius",
    "runtimekit_gpu_memory_temperature_celsius", "runtimekit_gpu_temperature_threshold_celsius",
    "runtimekit_gpu_power_draw_watts", "runtimekit_gpu_power_limit_watts", "runtimekit_gpu_energy_joules_total",
    "runtimekit_gpu_clock_hertz", "runtimekit_gpu_clock_max_hertz", "runtimekit_gpu_clock_event_active",
    "runtimekit_gpu_performance_state", "runtimekit_gpu_pcie_link_generation", "runtimekit_gpu_pcie_link_width",
    "runtimekit_gpu_pcie_link_max_generation", "runtimekit_gpu_pcie_link_max_width", "runtimekit_gpu_pcie_tx_bytes_total",
    "runtimekit_gpu_pcie_rx_bytes_total", "runtimekit_gpu_pcie_replay_total", "runtimekit_gpu_ecc_enabled",
    "runtimekit_gpu_ecc_errors", "runtimekit_gpu_remapped_rows", "runtimekit_gpu_remapped_rows_pending",
    "runtimekit_gpu_remapped_rows_failure", "runtimekit_gpu_nvlink_up", "runtimekit_gpu_nvlink_errors_total",
    "runtimekit_gpu_nvlink_tx_bytes_total", "runtimekit_gpu_nvlink_rx_bytes_total", "runtimekit_gpu_compute_mode",
    "runtimekit_gpu_persistence_mode", "runtimekit_gpu_mig_mode",
]


MIG_LACKS = {"runtimekit_gpu_utilization_ratio", "runtimekit_gpu_memory_utilization_ratio"}


def promtool_check(text: str) -> str:
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return (done.stdout + done.stderr).strip()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_serves_every_card_metric_for_8_gpus_and_promtool_is_silent(tmp_path, scenario):
    agent = start_agent(tmp_path, "--sim", scenario, "--interval", "0.5")
    try:
        text = agent.metrics_text()
        samples = parse_samples(text)
        names = {name for name, _ in samples}
        mig = {dict(labels)["gpu"] for (name, labels), value in samples.items()
               if name == "runtimekit_gpu_mig_mode" and ("state", "current") in labels and value == 1}
        for family in CARD_FAMILIES:
            gpus = {dict(labels)["gpu"] for (name, labels) in samples if name.startswith(family) and "gpu" in dict(labels)}
            # A GPU in MIG mode has no whole-GPU SM and memory utilization (NVML: not supported).
            lacking = mig if family in MIG_LACKS else set()
            assert gpus == {str(i) for i in range(8)} - lacking, f"{family}: GPUs {sorted(gpus)}"
        assert "runtimekit_nvml_up" in names and agent.value("runtimekit_nvml_up") == 1
        assert promtool_check(text) == ""
        status, headers, body = agent.get("/metrics", {"Accept": "application/openmetrics-text"})
        assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.rstrip().endswith(b"# EOF")
    finally:
        agent.stop()


def test_no_hostname_and_gpu_series_carry_only_gpu_and_uuid(tmp_path):
    agent = start_agent(tmp_path, "--sim", "dgx-h100")
    try:
        for (name, labels) in agent.samples():
            keys = {k for k, _ in labels}
            assert not keys & {"hostname", "host", "instance", "node"}, name
            if name.startswith("runtimekit_gpu_") and name != "runtimekit_gpu_info":
                assert {"gpu", "uuid"} <= keys, name
    finally:
        agent.stop()


def test_health_endpoints_landing_page_gzip_and_clean_stop(tmp_path):
    agent = start_agent(tmp_path, "--sim", "dgx-h100")
    try:
        assert agent.get("/healthz")[0] == 200
        assert agent.get("/readyz")[0] == 200
        status, headers, body = agent.get("/")
        assert status == 200 and b"/metrics" in body and b"8 GPUs" in body
        status, headers, body = agent.get("/metrics", {"Accept-Encoding": "gzip"})
        assert headers.get("Content-Encoding") == "gzip"
        assert b"runtimekit_gpu_info" in gzip.decompress(body)
    finally:
        took = agent.stop(signal.SIGTERM)
    assert agent.process.returncode == 0
    assert took < 5.0


def test_sigint_also_stops_cleanly(tmp_path):
    agent = start_agent(tmp_path, "--sim", "dgx-a100")
    took = agent.stop(signal.SIGINT)
    assert agent.process.returncode == 0 and took < 5.0


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="a real NVML is installed here")
def test_without_nvml_the_agent_serves_nvml_up_0_and_says_why_once(tmp_path):
    agent = start_agent(tmp_path, "--interval", "0.2", wait_ready=False)
    try:
        deadline = time.monotonic() + 10
        while agent.value("runtimekit_nvml_up") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert agent.value("runtimekit_nvml_up") == 0
        assert agent.get("/healthz")[0] == 200
        assert agent.get("/sim/v1/faults")[0] == 404  # fault injection exists only on the simulator
        time.sleep(1.0)
        log = agent.log()
        assert log.count("NVML unavailable") == 1, log
        assert "NVML_ERROR_LIBRARY_NOT_FOUND" in log
    finally:
        agent.stop()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--interval", "0"], "sampling.interval_seconds: must be between"),
        (["--listen", "here"], "listen: must be HOST:PORT"),
        (["--sim", "dgx-z900"], "dgx-z900"),
        (["--config", "/nonexistent/runtimekit.yaml"], "cannot read"),
    ],
)
def test_configuration_errors_exit_2_with_the_key_named(args, message, tmp_path):
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "serve", "--state-dir", str(tmp_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_unknown_collector_in_config_exits_2(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("exporter:\n  collectors:\n    warp_drive: true\n")
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "serve", "--config", str(path), "--listen",
                           f"127.0.0.1:{free_port()}"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "warp_drive" in done.stderr
