"""Readings and counters of the simulated node: load with faults applied, integrated per tick.

Time is cut into ticks of ``tick_s`` seconds; readings are constant within a tick and cached per
GPU, counters (energy in mJ, PCIe bytes and replays, NVLink KiB and error counts, corrected ECC) integrate
per-tick rates and interpolate inside the current tick, so the same seed and clock readings give
the same answers however many calls came in between. Fault changes settle the counters first:
counters never go back (only a simulated reboot, a driver reload, restarts them).

Couplings modelled as hardware has them (gpu-faults.md §2.3): HW thermal slowdown sets clock-event
reasons 0x8 | 0x40 (HwSlowdown, HwThermalSlowdown), an external power brake 0x8 | 0x80
(HwSlowdown, HwPowerBrakeSlowdown); an NVLink CRC error is a flit CRC error or a data CRC error
(DL_CRC_FLIT or DL_CRC_DATA, ``Counters.crc_flit``/``crc_data``), and the transmitter replays
what failed its CRC, so ``nvlink-crc`` at rate R moves flit + data by R a second and DL_REPLAY by
R a second (one replay per CRC error): each error is counted once as a CRC error and once as a
replay.
"""

from __future__ import annotations

from dataclasses import replace

from .. import load as _load
from .state import Counters, NodeCore, _Gpu, _Rates

__all__ = ["CountersPart"]

_ECC_CORRECTED_P = 0.002  # chance per GPU per tick of one corrected (single-bit) ECC error


READING_DECIMALS = 2  # readings are taken to the 10 ms (round(t, 2))


class CountersPart(NodeCore):
    """Per-tick samples, rates and the counters they integrate into."""

    def _compute(self, g: _Gpu, tick: int) -> tuple[_load.Sample, _Rates]:
        """Sample and rates of GPU ``g`` during ``tick`` with the current faults applied."""
        m = g.spec.model
        # The job runs only on GPUs a running container holds (every GPU when no pods are declared).
        profile = self.load_profile if self._runs_job(g.spec.index) else "idle"
        s = _load.sample(m, profile, self.seed, g.spec.index, tick, tick * self.tick_s, self._offset_s)
        if g.faults:
            if self._fault(g, "thermal-slowdown") is not None:
                slow = m.temperature_thresholds_c["slowdown"]
                s = replace(
                    s,
                    temp_gpu=slow - 1,
                    temp_mem=max(s.temp_mem, slow + 2),
                    clock_sm=int(s.clock_sm * 0.55),
                    clock_graphics=int(s.clock_graphics * 0.55),
                    power_mw=int(s.power_mw * 0.7),
                    reasons=(s.reasons & ~0x1) | 0x8 | 0x40,
                )
            if self._fault(g, "power-brake") is not None:
                s = replace(
                    s,
                    clock_sm=int(s.clock_sm * 0.5),
                    clock_graphics=int(s.clock_graphics * 0.5),
                    power_mw=min(s.power_mw, int((m.power_idle_w + 0.3 * (m.power_limit_w - m.power_idle_w)) * 1000)),
                    reasons=(s.reasons & ~0x1) | 0x8 | 0x80,
                )
        links = m.nvlink_links
        up = [self.link_up(g.spec.index, i) for i in range(links)]
        n_up = sum(up)
        per_link = s.nvlink_kibs / n_up if n_up else 0.0
        crc = [0.0] * links
        for key, f in g.faults.items():
            if key[0] == "nvlink-crc":
                crc[key[1]] = f["params"]["rate"]
        rates = _Rates(
            power_mw=s.power_mw,
            pcie_tx_bps=s.pcie_tx_kbs * 1000.0,
            pcie_rx_bps=s.pcie_rx_kbs * 1000.0,
            nvlink_kibs=[per_link if u else 0.0 for u in up],
            nvlink_crc=crc,
            pcie_replays=replays["rate"] if (replays := self._fault(g, "pcie-replays")) else 0.0,
        )
        return s, rates

    def _current(self, g: _Gpu, tick: int) -> tuple[_load.Sample, _Rates]:
        key = (tick, self._fault_gen, self._proc_gen)
        if g.cache_key != key:
            g.cache = self._compute(g, tick)
            g.cache_key = key
        return g.cache  # type: ignore[return-value]

    def _add(self, g: _Gpu, r: _Rates, dt: float) -> None:
        a = g.acc
        a.energy_mj += r.power_mw * dt
        a.pcie_tx_bytes += r.pcie_tx_bps * dt
        a.pcie_rx_bytes += r.pcie_rx_bps * dt
        a.pcie_replays += r.pcie_replays * dt
        for i, v in enumerate(r.nvlink_kibs):
            if v:
                a.nvlink_tx_kib[i] += v * dt
                a.nvlink_rx_kib[i] += v * dt * 0.98
        for i, v in enumerate(r.nvlink_crc):
            if v:
                a.nvlink_crc[i] += v * dt
                a.nvlink_replay[i] += v * dt  # each CRC error is replayed once

    def _advance(self, g: _Gpu, t: float) -> int:
        """Fold every completed tick before ``t`` into the counters; returns the current tick."""
        tick = self._tick(t)
        while g.acc_tick < tick:
            _, r = self._compute(g, g.acc_tick)
            end = (g.acc_tick + 1) * self.tick_s
            self._add(g, r, end - g.seg_start)
            if _load.noise(self.seed, g.spec.index, g.acc_tick, 99) < _ECC_CORRECTED_P:
                g.acc.ecc_corrected += 1
            g.acc_tick += 1
            g.seg_start = end
        return tick

    def _settle(self, g: _Gpu, t: float) -> None:
        """Fold the counters up to ``t`` under the current faults (before they change)."""
        tick = self._advance(g, t)
        _, r = self._current(g, tick)
        self._add(g, r, t - g.seg_start)
        g.seg_start = t

    def reading(self, gpu: int, t: float | None = None) -> tuple[_load.Sample, Counters]:
        """The GPU's readings now (or at ``t``) and its counters interpolated to that instant."""
        if t is None:
            t = self.now()
        # One reading per GPU per 10 ms: the dozens of NVML calls of one sampling
        # cycle see one instant, as the driver's counters, which move in steps too, would show.
        t = round(t, READING_DECIMALS)
        g = self._gpus[gpu]
        with self._lock:
            key = (t, self._fault_gen, self._proc_gen)
            if g.reading is not None and g.reading_key == key:
                return g.reading
            tick = self._advance(g, t)
            s, r = self._current(g, tick)
            dt = max(0.0, t - g.seg_start)
            a = g.acc
            c = Counters(
                energy_mj=a.energy_mj + r.power_mw * dt,
                pcie_tx_bytes=a.pcie_tx_bytes + r.pcie_tx_bps * dt,
                pcie_rx_bytes=a.pcie_rx_bytes + r.pcie_rx_bps * dt,
                nvlink_tx_kib=[x + v * dt for x, v in zip(a.nvlink_tx_kib, r.nvlink_kibs, strict=True)],
                nvlink_rx_kib=[x + v * dt * 0.98 for x, v in zip(a.nvlink_rx_kib, r.nvlink_kibs, strict=True)],
                nvlink_crc=[x + v * dt for x, v in zip(a.nvlink_crc, r.nvlink_crc, strict=True)],
                nvlink_replay=[x + v * dt for x, v in zip(a.nvlink_replay, r.nvlink_crc, strict=True)],
                nvlink_recovery=list(a.nvlink_recovery),
                ecc_corrected=a.ecc_corrected,
                pcie_replays=a.pcie_replays + r.pcie_replays * dt,
            )
            g.reading_key, g.reading = key, (s, c)
        return s, c

    def sample(self, gpu: int) -> _load.Sample:
        """Instantaneous readings of the current tick (cached; a dict lookup when warm)."""
        t = self.now()
        g = self._gpus[gpu]
        with self._lock:
            return self._current(g, self._tick(t))[0]
