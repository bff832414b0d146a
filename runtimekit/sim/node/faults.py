"""Fault injection on the simulated node and the driver-side view faults shape.

``inject``/``clear`` change what the driver reports; the XIDs and ECC events a fault raises
go to the node's event sets. Error couplings follow the hardware (gpu-faults.md §2.2, §2.3):

- ``ecc-uncorrectable``: an uncorrectable (DBE) error: volatile and aggregate uncorrected ECC
  counters grow, the DBE event and XID 48 are raised;
- ``ecc-contained``: a contained uncorrectable DRAM error on an A100/H100 (row remapping parts):
  the same counters grow, each faulty row is recorded for remapping (uncorrectable remapped rows
  +1 per error, remap pending until a reset), the DBE event, XID 94 (contained: only the faulting
  application dies) and XID 63 (row remapping recorded) are raised. The remapper holds
  ``REMAP_ROWS_MAX`` rows (512: 8 per bank, NVIDIA "GPU Memory Error Management", row-remapping;
  gpu-faults.md §2.2); a row past them cannot be remapped, so the remap fails: failureOccurred
  is set and XID 64 raised (the ECC counters still count the error);
- ``nvlink-crc``: CRC errors at a rate, each a flit or a data CRC error and each replayed (see
  ``counters``);
- ``nvlink-recovery``: link recoveries (DL_RECOVERY), with no CRC or replay movement;
- ``xid``: an XID alone, no counter moves (79 also loses the GPU).

A GPU off the bus (``gpu-lost``, XID 79) stays off it until a reboot (or until the injected fault
is cleared, the simulator's undo): a GPU the driver cannot reach raises nothing, so an ``xid`` on
it is refused and the events of any other fault injected on it are not delivered; it cannot be
reset either (``SimulatedNode.reset_gpu``; gpu-faults.md §2.3: "reset impossible — device
unreachable").

The row-remap failure flag (failureOccurred: "a remap ever failed") lives in the InfoROM, like
the remapped-row counts: a GPU reset or a reboot keeps it (``_burn_in``); clearing an injected
``row-remap-failure`` before either undoes it.
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
_XID_ROW_REMAP_FAILURE = 64
_XID_FALLEN_OFF_BUS = 79
_LINK_KINDS = ("nvlink-down", "nvlink-crc", "nvlink-recovery")
_REMAP_KINDS = ("ecc-contained", "row-remap-pending", "row-remap-failure")
#: Rows the row remapper of an A100/H100 can remap: 8 per bank (MEM row-remapping; gpu-faults.md §2.2).
REMAP_ROWS_MAX = 512


class FaultsPart(NodeCore):
    """Inject, clear and list faults; answer what the driver reports under them."""

    def inject(self, gpu: int, kind: str, /, **params: Any) -> dict:
        """Start fault ``kind`` on ``gpu`` (see ``FAULT_KINDS``); returns the active fault.

        Raises FaultError naming the parameter and its allowed values (``gpu`` and ``kind`` are
        positional, so a parameter of that name is refused as any unknown one). Injecting a kind
        that is already active replaces its parameters (and delivers its XID again).
        """
        gpu = self._check_gpu(gpu)
        p = validate_params(kind, params)
        g = self._gpus[gpu]
        self._check_injectable(g, kind, p)
        t = self.now()
        with self._lock:
            self._settle(g, t)
            was_lost = self._lost(g)
            fault = {"gpu": gpu, "fault": kind, "params": p, "since_s": round(t, 6)}
            g.faults[(kind, p["link"]) if kind in _LINK_KINDS else (kind,)] = fault
            xids = self._apply(g, kind, p)
            self._fault_gen += 1
            lost_now = self._lost(g)
        if not was_lost:  # a GPU off the bus raises nothing the driver could hear
            self._deliver(gpu, kind, xids)
        if lost_now and not was_lost:
            self.events.deliver(gpu, LOST, 0)
        return dict(fault, params=dict(p))

    def _check_injectable(self, g: _Gpu, kind: str, p: dict[str, Any]) -> None:
        """Refuse what GPU ``g``'s model cannot have or its state cannot take (FaultError naming
        the field); fill ``pcie-downtrain``'s default generation from the model."""
        gpu, model = g.spec.index, g.spec.model
        if kind in _LINK_KINDS and not model.nvlink_links:
            raise FaultError(f"fault: {kind} needs NVLink; GPU {gpu} ({model.name}) has none")
        if "link" in p and not p["link"] < model.nvlink_links:
            raise FaultError(f"params.link: got {p['link']}; GPU {gpu} has links 0..{model.nvlink_links - 1}")
        if kind in _REMAP_KINDS and not model.row_remapping:
            raise FaultError(f"fault: {kind} needs row remapping (A100/H100 and later); GPU {gpu} is {model.name}")
        if kind == "xid" and self._lost(g):
            raise FaultError(f"gpu: GPU {gpu} is off the bus ({self._lost_by(g)}); it raises no XID until a reboot")
        if kind == "pcie-downtrain":
            if p["gen"] is None:
                p["gen"] = max(1, model.pcie_generation - 1)
            if p["gen"] > model.pcie_generation:
                raise FaultError(f"params.gen: got {p['gen']}; must be in 1..{model.pcie_generation}")
            if p["width"] > model.pcie_width or p["width"] not in (1, 2, 4, 8, 16):
                raise FaultError(f"params.width: got {p['width']}; must be one of 1, 2, 4, 8, 16 and <= {model.pcie_width}")

    def _apply(self, g: _Gpu, kind: str, p: dict[str, Any]) -> list[int]:
        """Move the counters and flags fault ``kind`` moves (lock held); returns the XIDs it raises,
        in order."""
        own: int | None = p["xid"] if kind == "xid" else FAULT_KINDS[kind].xid
        xids = [] if own is None else [own]
        if kind in ("ecc-uncorrectable", "ecc-contained"):
            g.ecc_unc_volatile += p["count"]
            g.ecc_unc_aggregate += p["count"]
        if kind in ("ecc-contained", "row-remap-pending"):
            rows = p.get("count", 1)
            remapped = self._remap_rows(g, rows)
            # ecc-contained: XID 94, then the remap's 63; both: 64 for rows the remapper had no room for
            xids = (xids if kind == "ecc-contained" else []) + ([_XID_ROW_REMAP_RECORDED] if remapped else [])
            xids += [_XID_ROW_REMAP_FAILURE] if remapped < rows else []
        if kind == "nvlink-recovery":
            g.acc.nvlink_recovery[p["link"]] += p["count"]
        return xids

    def _remap_rows(self, g: _Gpu, rows: int) -> int:
        """Record ``rows`` faulty rows for remapping, as many as the remapper has room for (lock
        held); returns how many were recorded. A row past ``REMAP_ROWS_MAX`` fails its remap."""
        remapped = min(rows, REMAP_ROWS_MAX - g.remap_unc)
        g.remap_unc += remapped
        g.remap_pending = g.remap_pending or remapped > 0
        g.remap_failure = g.remap_failure or remapped < rows
        return remapped

    def _deliver(self, gpu: int, kind: str, xids: list[int]) -> None:
        """The events fault ``kind`` raises on ``gpu``: a DBE event for ECC faults, then ``xids``."""
        if kind in ("ecc-uncorrectable", "ecc-contained"):
            self.events.deliver(gpu, _DBE_EVENT, 0)
        for xid in xids:
            self.events.deliver(gpu, _XID_EVENT, xid)

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

    def inforom_corrupt(self, gpu: int) -> bool:
        """Whether GPU ``gpu``'s InfoROM fails its checksum (the ``inforom-corrupt`` fault)."""
        with self._lock:
            return self._fault(self._gpus[gpu], "inforom-corrupt") is not None

    def recovery_action(self, gpu: int) -> int:
        """The driver's announced recovery action for ``gpu`` (nvmlDeviceGpuRecoveryAction_t; 0: none)."""
        with self._lock:
            params = self._fault(self._gpus[gpu], "recovery-action")
        return RECOVERY_ACTIONS[params["action"]] if params else 0

    def _lost(self, g: _Gpu) -> bool:
        """GPU ``g`` is off the bus: ``gpu-lost``, or XID 79 (never replaced: ``_check_injectable``
        refuses an XID on a lost GPU)."""
        return bool(self._lost_by(g))

    def _lost_by(self, g: _Gpu) -> str:
        """What took GPU ``g`` off the bus ("gpu-lost", "XID 79"), "" when it is on it."""
        if ("gpu-lost",) in g.faults:
            return "gpu-lost"
        x = g.faults.get(("xid",))
        return "XID 79" if x and x["params"]["xid"] == _XID_FALLEN_OFF_BUS else ""

    def _burn_in(self, g: _Gpu) -> None:
        """What a GPU reset or reboot leaves in GPU ``g``'s InfoROM from its active faults (lock
        held): a row-remap failure stays recorded (failureOccurred: a remap ever failed)."""
        if ("row-remap-failure",) in g.faults:
            g.remap_failure = True

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
        """(correctable, uncorrectable, pending, failure) as nvmlDeviceGetRemappedRows: failure is
        the InfoROM's flag or an injected ``row-remap-failure`` still active."""
        g = self._gpus[gpu]
        failure = g.remap_failure or ("row-remap-failure",) in g.faults
        return 0, g.remap_unc, int(g.remap_pending), int(failure)

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
