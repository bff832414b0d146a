"""ECC, row remapping and page retirement (gpu-faults.md §2.2, §6).

Faults (severity, action, clears):

- ``ecc_uncorrectable`` (critical, drain_and_reset_gpu, gpu_reset): the volatile uncorrectable
  count is above 0, or XID 48. The volatile count is zeroed by every driver load and GPU reset, so
  "above 0" means exactly "an uncorrectable error since the last reset" — the condition the reset
  cures; a drop between samples is that reset, never a fault. Evidence gives the change since the
  previous sample ("0 → 2") when there was one.
- ``row_remap_pending`` (warning, drain_and_reset_gpu, gpu_reset): the remapper has a remap waiting
  for a reset (or XID 63 on a GPU with row remapping): running work is unaffected, reset at the
  next idle moment. Disappears when the flag clears after the reset.
- ``row_remap_failure`` (critical, replace_node, node_reboot): the remapper's failure flag is set
  — a remap failed at some point (§6: cordon, reset, field diagnostics to confirm, then RMA). XID
  64 alone follows the catalog (critical, drain_and_reset_gpu, gpu_reset). Sticky, because the
  flag is unreadable while MIG instances exist and must not "clear" then.
- ``remapped_rows_exhausted`` (warning, replace_node, node_reboot): uncorrectable remapped rows at
  the remapper's capacity (``remapped_rows_uncorrectable_limit``): the next error cannot be fixed.
- ``retired_pages_pending`` (warning, drain_and_reset_gpu, gpu_reset): pre-Ampere retirement
  waiting for a reset (or XID 63 on a GPU without row remapping).
- ``retired_pages_limit`` (critical, replace_node, node_reboot): single- plus double-bit retired
  pages at ``retired_pages_limit``.
- ``ecc_contained`` (XID 94: warning, restart_application, clean_samples) and ``ecc_uncontained``
  (XID 95/140: critical, drain_and_reset_gpu, gpu_reset) — as the XID catalog says.

Correctable (single-bit) counts are trend data for the exporter, not a fault (§6: Info).
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import (
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    REPLACE_NODE,
    WARNING,
    DetectorInput,
    Finding,
)
from runtimekit.healthcheck.xid_catalog import default_catalog

from ._common import available, clock, finding, merge, previous_by_uuid, readable_gpus

NAME = "ecc"


def _retires_pages(gpu: Any) -> bool:
    """True for a GPU with page retirement and no row remapper (pre-Ampere)."""
    rows, pages = gpu.remapped_rows, gpu.retired_pages
    has_rows = rows is not None and available(rows.pending)
    return not has_rows and pages is not None and available(pages.pending)


def ecc(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    catalog = default_catalog()
    findings: list[Finding] = []
    gpus = {g.uuid: g for g in readable_gpus(data.snapshot)}
    before = previous_by_uuid(data.previous)

    for gpu in gpus.values():
        old = before.get(gpu.uuid)
        if gpu.ecc is not None and available(gpu.ecc.uncorrected_volatile) and gpu.ecc.uncorrected_volatile > 0:
            now = gpu.ecc.uncorrected_volatile
            was = old.ecc.uncorrected_volatile if old is not None and old.ecc is not None else None
            if available(was) and was is not None and was < now:
                evidence = f"volatile uncorrectable ECC {was} → {now} since the last sample at {clock(old.sampled_at)}"
            else:
                evidence = f"volatile uncorrectable ECC count is {now} (errors since the driver loaded or the GPU was last reset)"
            findings.append(finding(gpu, "ecc_uncorrectable", CRITICAL, DRAIN_AND_RESET_GPU, evidence, CLEARS_ON_RESET))

        rows = gpu.remapped_rows
        if rows is not None:
            counts = ""
            if available(rows.uncorrectable, rows.correctable):
                counts = f" ({rows.uncorrectable} uncorrectable and {rows.correctable} correctable rows remapped)"
            if available(rows.pending) and rows.pending:
                findings.append(finding(
                    gpu, "row_remap_pending", WARNING, DRAIN_AND_RESET_GPU,
                    f"a row remap is pending{counts}; reset the GPU at the next idle moment to apply it",
                    CLEARS_ON_RESET,
                ))
            if available(rows.failure) and rows.failure:
                findings.append(finding(
                    gpu, "row_remap_failure", CRITICAL, REPLACE_NODE,
                    f"the row remapper reports a failed remap{counts}; reset the GPU and run field "
                    "diagnostics to confirm, then RMA",
                    CLEARS_ON_REBOOT,
                ))
            limit = config["remapped_rows_uncorrectable_limit"]
            if available(rows.uncorrectable) and rows.uncorrectable >= limit:
                findings.append(finding(
                    gpu, "remapped_rows_exhausted", WARNING, REPLACE_NODE,
                    f"{rows.uncorrectable} uncorrectable rows remapped (limit {limit}): the remapper has no spare rows left",
                    CLEARS_ON_REBOOT,
                ))

        pages = gpu.retired_pages
        if pages is not None:
            if available(pages.pending) and pages.pending:
                findings.append(finding(
                    gpu, "retired_pages_pending", WARNING, DRAIN_AND_RESET_GPU,
                    "a page retirement is pending; reset the GPU at the next idle moment to apply it",
                    CLEARS_ON_RESET,
                ))
            if available(pages.single_bit_ecc, pages.double_bit_ecc):
                total = pages.single_bit_ecc + pages.double_bit_ecc
                limit = config["retired_pages_limit"]
                if total >= limit:
                    findings.append(finding(
                        gpu, "retired_pages_limit", CRITICAL, REPLACE_NODE,
                        f"{total} pages retired ({pages.single_bit_ecc} single-bit, {pages.double_bit_ecc} "
                        f"double-bit; limit {limit} of the 64 the GPU can retire)",
                        CLEARS_ON_REBOOT,
                    ))

    for event in data.xids:
        entry = catalog.get(event.xid)
        if entry.detector != NAME:
            continue
        fault = entry.fault
        gpu = gpus.get(event.uuid)
        if fault == "row_remap_pending" and gpu is not None and _retires_pages(gpu):
            fault = "retired_pages_pending"  # XID 63 on a pre-Ampere GPU: a page retirement
        findings.append(Finding(
            event.gpu_index, event.uuid, fault, entry.severity, entry.action,
            f"XID {event.xid} ({entry.meaning}) at {clock(event.received_at)}", entry.clears, event.gpu_instance_id,
        ))
    return None, merge(findings)


ecc.name = NAME  # type: ignore[attr-defined]
detector = ecc
