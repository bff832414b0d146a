"""PCIe link state (nvmlDeviceGetCurrPcieLinkGeneration/Width, GetMaxPcieLinkGeneration/Width),
traffic counters (NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES) and replays (nvmlDeviceGetPcieReplayCounter)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import CardCollector, add, counter, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class PcieCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        gen = gauge("runtimekit_gpu_pcie_link_generation", "Current PCIe link generation (drops when idle to save power).")
        width = gauge("runtimekit_gpu_pcie_link_width", "Current PCIe link width in lanes.")
        max_gen = gauge("runtimekit_gpu_pcie_link_max_generation", "Maximum PCIe link generation supported by the GPU and system.")
        max_width = gauge("runtimekit_gpu_pcie_link_max_width", "Maximum PCIe link width in lanes.")
        tx = counter("runtimekit_gpu_pcie_tx_bytes_total", "Bytes transmitted by the GPU over PCIe since driver load.", unit="bytes")
        rx = counter("runtimekit_gpu_pcie_rx_bytes_total", "Bytes received by the GPU over PCIe since driver load.", unit="bytes")
        replay = counter("runtimekit_gpu_pcie_replay_total", "PCIe replays (link-level retransmissions) since driver load.")
        for gpu in live_gpus(view):
            labels = gpu_labels(gpu)
            add(max_gen, labels, gpu.limits.pcie_max_generation)
            add(max_width, labels, gpu.limits.pcie_max_width)
            p = gpu.pcie
            if p is None:
                continue
            add(gen, labels, p.generation)
            add(width, labels, p.width)
            add(tx, labels, p.tx_bytes)
            add(rx, labels, p.rx_bytes)
            add(replay, labels, p.replay_count)
        yield from nonempty(gen, width, max_gen, max_width, tx, rx, replay)
