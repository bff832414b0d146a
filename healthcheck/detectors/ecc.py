"""ECC, row remapping and page retirement (gpu-faults.md §2.2, §6).

Faults (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``ecc_contained`` (warning, drain_and_reset_gpu, gpu_reset, schedulable): XID 94 — a contained
  uncorrectable error, only the faulting application died. The uncorrected ECC counters move with
  it and a row remap usually goes pending: that is the same event, not an escalation.
- ``ecc_uncorrectable`` (critical, drain_and_reset_gpu, gpu_reset): XID 48, or a jump of the
  uncorrected ECC counter (volatile; aggregate where volatile is unreadable) that no XID explains:
  no XID 94 (nor 48, 95, 140) for the GPU within ``contained_xid_window_seconds`` of the jump,
  before or after it. The jump happened between the sample before (``after``) and the one that
  saw it, so that whole interval counts as "the jump", at any sampling interval. The XID comes
  from the event thread, the counters from the sampler, so a jump seen first waits up to the
  window for its XID before it is judged; a counter that went down was a reset (the baseline
  follows it), never a fault. The first reading of a GPU is judged from 0 (nothing explained
  errors counted before the agent knew the GPU). A GPU is judged on its baseline's counter only:
  volatile unreadable for a sample leaves that sample unjudged (the aggregate, a lifetime count,
  is never compared with a volatile baseline); aggregate is used only where volatile was not
  readable when the GPU was first seen. The baseline is part of the detector state the
  store persists, so an agent restart does not re-judge a contained error.
- ``ecc_uncontained`` (critical): XID 95 or 140.
- ``row_remap_pending`` (warning, drain_and_reset_gpu, gpu_reset, schedulable): the remapper has a
  remap waiting for a reset (or XID 63 on a GPU with row remapping). It follows XID 94 and stays
  the same warning.
- ``row_remap_failure`` (critical, replace_node, node_reboot): the remapper's failure flag — a
  remap failed (§6: cordon, reset, field diagnostics, RMA). Sticky, because the flag is
  unreadable while MIG instances exist. XID 64 alone is the driver's ``xid_64``.
- ``remapped_rows_exhausted`` (warning, replace_node): uncorrectable remapped rows at
  ``remapped_rows_uncorrectable_limit``: the next error cannot be fixed.
- ``retired_pages_pending`` (warning): pre-Ampere retirement waiting for a reset (or XID 63 on a
  GPU without row remapping); ``retired_pages_limit`` (critical, replace_node): retired pages at
  ``retired_pages_limit``.

Correctable (single-bit) counts are trend data for the exporter, not a fault (§6: Info).

State (JSON-friendly, persisted by the store): ``base`` {uuid: [counter, value]} the last judged
uncorrected count; ``pending`` {uuid: [since, from, to, counter]} a jump seen at the sample of
``since``, waiting for its XID; ``after`` {uuid: time} the sample before that jump (the jump happened
after it; a state saved without it: ``since``);
``explained`` {uuid: [received_at, ...]} recent XIDs that explain a jump.
"""

from __future__ import annotations

from typing import Any

from runtimekit.gpu.types import GpuSnapshot, is_available
from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import available, clock, finding, merge, previous_by_uuid, readable_gpus

NAME = "ecc"
EXPLAINS = ("ecc_contained", "ecc_uncorrectable", "ecc_uncontained")  # faults whose XIDs explain a jump


def _retires_pages(gpu: Any) -> bool:
    """True for a GPU with page retirement and no row remapper (pre-Ampere)."""
    rows, pages = gpu.remapped_rows, gpu.retired_pages
    has_rows = rows is not None and available(rows.pending)
    return not has_rows and pages is not None and available(pages.pending)


def _uncorrected(gpu: GpuSnapshot, counter: str | None) -> tuple[str, int] | None:
    """(counter name, uncorrected count) of ``counter``, the baseline's; with no baseline yet,
    volatile where readable, else aggregate. None when that counter is unreadable now."""
    if gpu.ecc is None:
        return None
    for name in (counter,) if counter else ("uncorrected_volatile", "uncorrected_aggregate"):
        value = getattr(gpu.ecc, name)
        if available(value):
            return name, int(value)
    return None


def _counters(state: dict[str, Any], data: DetectorInput, gpus: dict[str, GpuSnapshot],
              window: float) -> tuple[dict[str, Any], list[Finding]]:
    """Judge uncorrected-counter jumps against the XIDs that explain them."""
    base = {u: list(v) for u, v in (state.get("base") or {}).items()}
    pending = {u: list(v) for u, v in (state.get("pending") or {}).items()}
    after = {u: float(t) for u, t in (state.get("after") or {}).items() if u in pending}
    explained = {u: [float(t) for t in ts] for u, ts in (state.get("explained") or {}).items()}
    policy = default_policy()
    for event in data.xids:
        if policy.xid(event.xid).fault in EXPLAINS:
            explained.setdefault(event.uuid, []).append(event.received_at)

    def explains(uuid: str, after: float, since: float) -> bool:
        return any(after - window <= t <= since + window for t in explained.get(uuid, ()))

    before = previous_by_uuid(data.previous)
    for uuid, gpu in gpus.items():
        known = base.get(uuid)
        reading = _uncorrected(gpu, str(known[0]) if known else None)
        if reading is None:
            continue
        counter, value = reading
        was = int(known[1]) if known else 0
        if value < was:  # a reset (or a driver reload) zeroed the volatile count
            base[uuid] = [counter, value]
            pending.pop(uuid, None)
        elif value > was:
            held = pending.get(uuid)
            if held is None:
                old = before.get(uuid)
                pending[uuid] = [gpu.sampled_at, was, value, counter]
                after[uuid] = old.sampled_at if old is not None and old.sampled_at < gpu.sampled_at else gpu.sampled_at
            else:
                held[2] = value
        elif known is None:
            base[uuid] = [counter, value]

    findings = []
    for uuid, (since, was, value, counter) in list(pending.items()):
        start = after.get(uuid, since)
        if explains(uuid, start, since):
            base[uuid] = [counter, value]
            del pending[uuid]
        elif data.now - since >= window:
            judged = gpus.get(uuid)
            if judged is not None:
                findings.append(finding(
                    judged, "ecc_uncorrectable",
                    f"uncorrected ECC errors ({counter.replace('_', ' ')}) {int(was)} → {int(value)} between "
                    f"{clock(start)} and {clock(since)} with no contained-error XID 94 (nor XID 48/95/140) "
                    f"within {window:g} s of them",
                ))
            base[uuid] = [counter, value]
            del pending[uuid]
    after = {uuid: t for uuid, t in after.items() if uuid in pending}
    # An XID is kept while it may still explain a jump: one the next sample sees happened after
    # the latest sample, and a held one after its own ``after``.
    kept_from = [gpu.sampled_at for gpu in gpus.values()] + [after.get(uuid, held[0]) for uuid, held in pending.items()]
    horizon = min([data.now, *kept_from]) - window
    explained = {u: kept for u, ts in explained.items() if (kept := [t for t in ts if t >= horizon])}
    return {"base": base, "pending": pending, "after": after, "explained": explained}, findings


def ecc(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    policy = default_policy()
    state = state or {}
    gpus = {uuid: gpu for uuid, gpu in readable_gpus(data.snapshot)}
    new_state, findings = _counters(state, data, gpus, config["contained_xid_window_seconds"])

    for gpu in gpus.values():
        rows = gpu.remapped_rows
        if rows is not None:
            counts = ""
            if available(rows.uncorrectable, rows.correctable):
                counts = f" ({rows.uncorrectable} uncorrectable and {rows.correctable} correctable rows remapped)"
            if available(rows.pending) and rows.pending:
                findings.append(finding(
                    gpu, "row_remap_pending",
                    f"a row remap is pending{counts}; reset the GPU at the next idle moment to apply it",
                ))
            if available(rows.failure) and rows.failure:
                findings.append(finding(
                    gpu, "row_remap_failure",
                    f"the row remapper reports a failed remap{counts}; reset the GPU and run field "
                    "diagnostics to confirm, then RMA",
                ))
            limit = config["remapped_rows_uncorrectable_limit"]
            if available(rows.uncorrectable) and rows.uncorrectable >= limit:
                findings.append(finding(
                    gpu, "remapped_rows_exhausted",
                    f"{rows.uncorrectable} uncorrectable rows remapped (limit {limit}): the remapper has no spare rows left",
                ))

        pages = gpu.retired_pages
        if pages is not None:
            if available(pages.pending) and pages.pending:
                findings.append(finding(
                    gpu, "retired_pages_pending",
                    "a page retirement is pending; reset the GPU at the next idle moment to apply it",
                ))
            single, double = pages.single_bit_ecc, pages.double_bit_ecc
            if is_available(single) and is_available(double):
                total = single + double
                limit = config["retired_pages_limit"]
                if total >= limit:
                    findings.append(finding(
                        gpu, "retired_pages_limit",
                        f"{total} pages retired ({single} single-bit, {double} "
                        f"double-bit; limit {limit} of the 64 the GPU can retire)",
                    ))

    for event in data.xids:
        entry = policy.xid(event.xid)
        if entry.detector != NAME:
            continue
        fault = entry.fault
        target = gpus.get(event.uuid)
        if fault == "row_remap_pending" and target is not None and _retires_pages(target):
            fault = "retired_pages_pending"  # XID 63 on a pre-Ampere GPU: a page retirement
        findings.append(policy.finding(
            event.gpu_index, event.uuid, fault, f"XID {event.xid} ({entry.meaning}) at {clock(event.received_at)}",
            event.gpu_instance_id,
        ))
    return new_state, merge(findings)


ecc.name = NAME  # type: ignore[attr-defined]
detector = ecc
