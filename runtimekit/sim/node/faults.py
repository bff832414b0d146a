"""Fault injection on the simulated node and the driver-side view faults shape.

``inject``/``clear`` change what the driver reports; the XIDs and ECC events a fault raises
go to the node's event sets. Error couplings follow the hardware (gpu-faults.md §2.2, §2.3):

- ``ecc-uncorrectable``: an uncorrectable (DBE) error: volatile and aggregate uncorrected ECC
  counters grow, the DBE event and XID 48 are raised;
- ``ecc-contained``: a contained uncorrectable DRAM error on an A100/H100 (row remapping parts):
  the same counters grow, each faulty row is recorded for remapping (uncorrectable remapped rows
  +1 per error, remap pending until a reset), the DBE event, XID 94 (contained: only the faulting
  application dies) and XID 63 (row remapping recorded) are raised;
- ``nvlink-crc``: CRC errors at a rate, each replayed (see ``counters``);
- ``nvlink-recovery``: link recoveries (DL_RECOVERY), with no CRC or replay movement;
- ``xid``: an XID alone, no counter moves (79 also loses the GPU).
"""

from __future__ import annotations

from typing import Any

from ..events import LOST
from ..faults import COMPUTE_MODES, DRIVER_ERRORS, FAULT_KINDS, RECOVERY_ACTIONS, FaultError, validate_params
from .state import MiB, NodeCore, _Gpu

__all__ = ["FaultsPart"]

_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_DBE_EVENT = 0x2  # nvmlEventTypeDoubleBitEccError
_XID_ROW_REMAP_RECORDED = 63
_LINK_KINDS = ("nvlink-down", "nvlink-crc", "nvlink-recovery")


class FaultsPart(NodeCore):
    """Inject, clear and list faults; answer what the driver reports under them."""

    def inject(self, gpu: int, kind: str, **params: Any) -> dict:
        """Start fault ``kind`` on ``gpu`` (see ``FAULT_KINDS``); returns the active fault.

        Raises FaultError naming the parameter and its allowed values. Injecting a kind that is
        already active replaces its parameters (and delivers its XID again).
        """
        gpu = self._check_gpu(gpu)
        p = validate_params(kind, params)
        g = self._gpus[gpu]
        model = g.spec.model
        if "link" in p and not p["link"] < model.nvlink_links:
            raise FaultError(f"params.link: got {p['link']}; GPU {gpu} has links 0..{model.nvlink_links - 1}")
        if kind == "ecc-contained" and not model.row_remapping:
            raise FaultError(f"fault: ecc-contained needs row remapping (A100/H100 and later); GPU {gpu} is {model.name}")
        if kind == "pcie-downtrain":
            if p["gen"] is None:
                p["gen"] = max(1, model.pcie_generation - 1)
            if p["gen"] > model.pcie_generation:
                raise FaultError(f"params.gen: got {p['gen']}; must be in 1..{model.pcie_generation}")
            if p["width"] > model.pcie_width or p["width"] not in (1, 2, 4, 8, 16):
                raise FaultError(f"params.width: got {p['width']}; must be one of 1, 2, 4, 8, 16 and <= {model.pcie_width}")
        t = self.now()
        with self._lock:
            self._settle(g, t)
            key = (kind, p["link"]) if kind in _LINK_KINDS else (kind,)
            was_lost = self._lost(g)
            fault = {"gpu": gpu, "fault": kind, "params": p, "since_s": round(t, 6)}
            g.faults[key] = fault
            if kind in ("ecc-uncorrectable", "ecc-contained"):
                g.ecc_unc_volatile += p["count"]
                g.ecc_unc_aggregate += p["count"]
            if kind == "ecc-contained":
                g.remap_unc += p["count"]  # one faulty row recorded per error (distinct rows)
                g.remap_pending = True
            elif kind == "row-remap-pending":
                g.remap_unc += 1
                g.remap_pending = True
            elif kind == "row-remap-failure":
                g.remap_failure = True
            elif kind == "nvlink-recovery":
                g.acc.nvlink_recovery[p["link"]] += p["count"]
            self._fault_gen += 1
            lost_now = self._lost(g)
        xid = p["xid"] if kind == "xid" else FAULT_KINDS[kind].xid
        if kind in ("ecc-uncorrectable", "ecc-contained"):
            self.events.deliver(gpu, _DBE_EVENT, 0)
        if xid is not None:
            self.events.deliver(gpu, _XID_EVENT, xid)
        if kind == "ecc-contained":
            self.events.deliver(gpu, _XID_EVENT, _XID_ROW_REMAP_RECORDED)
        if lost_now and not was_lost:
            self.events.deliver(gpu, LOST, 0)
        return dict(fault, params=dict(p))

    def clear(self, gpu: int, kind: str | None = None) -> int:
        """Clear fault ``kind`` (all links of it) or every fault on ``gpu``; returns how many.

        Modes and flags revert and a lost GPU answers again; counters keep what they gained.
        """
        gpu = self._check_gpu(gpu)
        if kind is not None and kind not in FAULT_KINDS:
            raise FaultError(f"fault: unknown kind {kind!r} (allowed: {', '.join(sorted(FAULT_KINDS))})")
        t = self.now()
        with self._lock:
            g = self._gpus[gpu]
            self._settle(g, t)
            return self._drop_faults(g, kind)

    def _drop_faults(self, g: _Gpu, kind: str | None) -> int:
        """Remove ``kind`` (None: every fault) from ``g`` and revert its flags (lock held)."""
        keys = [k for k in g.faults if kind is None or k[0] == kind]
        for k in keys:
            del g.faults[k]
        kinds = {k[0] for k in keys}
        if kinds & {"row-remap-pending", "ecc-contained"}:
            g.remap_pending = ("row-remap-pending",) in g.faults or ("ecc-contained",) in g.faults
        if "row-remap-failure" in kinds:
            g.remap_failure = False
        if keys:
            self._fault_gen += 1
        return len(keys)

    def active_faults(self) -> list[dict]:
        """Every active fault: {gpu, fault, params, since_s}, by GPU then kind."""
        with self._lock:
            out = [dict(f, params=dict(f["params"])) for g in self._gpus for f in g.faults.values()]
        return sorted(out, key=lambda f: (f["gpu"], f["fault"], f["params"].get("link", 0)))

    def _fault(self, g: _Gpu, kind: str) -> dict | None:
        f = g.faults.get((kind,))
        return f["params"] if f else None

    def recovery_action(self, gpu: int) -> int:
        """The driver's announced recovery action for ``gpu`` (nvmlDeviceGpuRecoveryAction_t; 0: none)."""
        with self._lock:
            params = self._fault(self._gpus[gpu], "recovery-action")
        return RECOVERY_ACTIONS[params["action"]] if params else 0

    def _lost(self, g: _Gpu) -> bool:
        if ("gpu-lost",) in g.faults:
            return True
        x = g.faults.get(("xid",))
        return bool(x and x["params"]["xid"] == 79)

    # ---- driver-side view (used by nvml.FakeNvmlLibrary) -------------------------------------
    def device_error(self, gpu: int) -> int:
        """nvmlReturn_t every call on ``gpu`` gets now: 0, 15 (GPU lost) or a driver-error code."""
        g = self._gpus[gpu]
        if not g.faults:
            return 0
        with self._lock:
            if self._lost(g):
                return 15
            f = self._fault(g, "driver-error")
            return DRIVER_ERRORS[f["error"]] if f else 0

    def compute_mode(self, gpu: int) -> int:
        """NVML_COMPUTEMODE_* (default 0)."""
        f = self._fault(self._gpus[gpu], "compute-mode")
        return COMPUTE_MODES[f["mode"]] if f else 0

    def pcie_link(self, gpu: int) -> tuple[int, int]:
        """Current (generation, width)."""
        g = self._gpus[gpu]
        f = self._fault(g, "pcie-downtrain")
        if f:
            return f["gen"], f["width"]
        return g.spec.model.pcie_generation, g.spec.model.pcie_width

    def link_up(self, gpu: int, link: int) -> bool:
        return ("nvlink-down", link) not in self._gpus[gpu].faults

    def ecc(self, gpu: int) -> dict[str, int]:
        """ECC counts: corrected/uncorrected x volatile/aggregate."""
        _, counters = self.reading(gpu)
        g = self._gpus[gpu]
        return {
            "corrected_volatile": counters.ecc_corrected,
            "corrected_aggregate": g.ecc_corr_aggregate_base + counters.ecc_corrected,
            "uncorrected_volatile": g.ecc_unc_volatile,
            "uncorrected_aggregate": g.ecc_unc_aggregate,
        }

    def remapped_rows(self, gpu: int) -> tuple[int, int, int, int]:
        """(correctable, uncorrectable, pending, failure) as nvmlDeviceGetRemappedRows."""
        g = self._gpus[gpu]
        return 0, g.remap_unc, int(g.remap_pending), int(g.remap_failure)

    def memory(self, gpu: int) -> tuple[int, int, int]:
        """(total, reserved, used) bytes; used = processes + leak (NVML v2 meaning)."""
        g = self._gpus[gpu]
        m = g.spec.model
        total, reserved = m.memory_total_mib * MiB, m.memory_reserved_mib * MiB
        used = self.process_memory_on(gpu)
        leak = self._fault(g, "memory-leak")
        if leak:
            used += leak["bytes"]
        return total, reserved, min(used, total - reserved)
