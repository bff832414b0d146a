"""NVLink per link: state (nvmlDeviceGetNvLinkState), error counters (nvmlDeviceGetNvLinkErrorCounter)
and data throughput (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}, KiB -> bytes)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from runtimekit.exporter.collectors._common import GPU_LABELS, CardCollector, add, counter, gauge, gpu_labels, live_gpus, nonempty
from runtimekit.exporter.family import Family
from runtimekit.state import NodeView


class NvLinkCollector(CardCollector):
    def collect(self, view: NodeView) -> Iterable[Family | Metric]:
        link_labels = (*GPU_LABELS, "link")
        links = gauge("runtimekit_gpu_nvlink_links", "NVLinks the device has (NVML_FI_DEV_NVLINK_LINK_COUNT).")
        up = gauge("runtimekit_gpu_nvlink_up", "1 when the NVLink is active, else 0.", labels=link_labels)
        errors = counter(
            "runtimekit_gpu_nvlink_errors_total",
            "NVLink errors since driver load, by counter (crc_flit, crc_data, replay, recovery).",
            labels=(*link_labels, "counter"),
        )
        tx = counter("runtimekit_gpu_nvlink_tx_bytes_total", "NVLink data payload bytes transmitted since driver load.", labels=link_labels, unit="bytes")
        rx = counter("runtimekit_gpu_nvlink_rx_bytes_total", "NVLink data payload bytes received since driver load.", labels=link_labels, unit="bytes")
        for gpu in live_gpus(view):
            labels = gpu_labels(gpu)
            add(links, labels, gpu.limits.nvlink_count)
            for link in gpu.nvlinks:
                ll = [*labels, str(link.link)]
                add(up, ll, link.active)
                add(errors, [*ll, "crc_flit"], link.crc_flit_errors)
                add(errors, [*ll, "crc_data"], link.crc_data_errors)
                add(errors, [*ll, "replay"], link.replay_errors)
                add(errors, [*ll, "recovery"], link.recovery_errors)
                add(tx, ll, link.tx_bytes)
                add(rx, ll, link.rx_bytes)
        yield from nonempty(links, up, errors, tx, rx)
