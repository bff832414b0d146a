"""The simulated workload: what each GPU is doing at a given tick, as a pure function.

``sample(...)`` maps (model, profile, seed, gpu, tick) to a ``Sample`` of instantaneous readings.
Randomness comes from ``noise(seed, gpu, tick, stream)`` (a splitmix64 hash), never from a shared
RNG stream, so the same seed and clock give the same answers however many calls were made.

The ``training`` profile is one node-wide job per 1200 s cycle (the seed shifts where time 0
falls in it): idle 60 s, warm-up 30 s, train 510 s, checkpoint 30 s (PCIe-heavy, GPUs nearly
idle), train 510 s, eval 60 s. ``busy`` trains all the time, ``idle`` never runs anything.
Magnitudes are typical of SXM boards under LLM training: near-cap power, 50-70 % of NVLink
bandwidth, a few GB/s of PCIe (tens during checkpoints), HBM 5-10 C warmer than the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scenario import GpuModel

__all__ = ["CYCLE_S", "PHASES", "Phase", "Sample", "noise", "mix", "phase_at", "sample"]

_MASK = (1 << 64) - 1

CYCLE_S = 1200.0


@dataclass(frozen=True)
class Phase:
    """One phase of the job cycle; ``load`` is the target busy ratio 0..1."""

    name: str
    start_s: float
    end_s: float
    load: float
    nvlink: float  # share of NVLink bandwidth used 0..1
    pcie_gbs: float  # host traffic in GB/s (both directions together)
    job: bool  # the job's process holds memory in this phase


PHASES = (
    Phase("idle", 0, 60, 0.0, 0.0, 0.002, False),  # a trickle of driver and telemetry traffic
    Phase("warmup", 60, 90, 0.45, 0.1, 6.0, True),
    Phase("train", 90, 600, 0.96, 0.6, 2.0, True),
    Phase("checkpoint", 600, 630, 0.12, 0.05, 24.0, True),
    Phase("train", 630, 1140, 0.96, 0.6, 2.0, True),
    Phase("eval", 1140, 1200, 0.6, 0.3, 1.0, True),
)
_BUSY = Phase("train", 0, CYCLE_S, 0.96, 0.6, 2.0, True)
_IDLE = Phase("idle", 0, CYCLE_S, 0.0, 0.0, 0.002, False)


def mix(*values: int) -> int:
    """splitmix64 over a sequence of ints: a well-spread 64-bit hash."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & _MASK)) + 0x9E3779B97F4A7C15 & _MASK
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
        x ^= x >> 31
    return x


def noise(seed: int, gpu: int, tick: int, stream: int) -> float:
    """Deterministic uniform value in [0, 1) for (seed, gpu, tick, stream)."""
    return mix(seed, gpu, tick, stream) / 2.0**64


def phase_at(profile: str, t: float, offset_s: float) -> tuple[Phase, int]:
    """The phase at ``t`` seconds since start, and the job cycle number (job id)."""
    if profile == "idle":
        return _IDLE, 0
    if profile == "busy":
        return _BUSY, 0
    shifted = t + offset_s
    cycle = int(shifted // CYCLE_S)
    into = shifted - cycle * CYCLE_S
    for ph in PHASES:
        if into < ph.end_s:
            return ph, cycle
    return PHASES[-1], cycle


@dataclass(frozen=True, slots=True)
class Sample:
    """Instantaneous readings of one GPU for one tick, before faults are applied.

    Units: percent, milliwatts, celsius, MHz, KB/s (PCIe, as nvmlDeviceGetPcieThroughput),
    KiB/s per direction for all NVLinks together.
    """

    phase: str
    cycle: int
    util_gpu: int
    util_mem: int
    util_enc: int
    util_dec: int
    power_mw: int
    temp_gpu: int
    temp_mem: int
    clock_sm: int
    clock_mem: int
    clock_graphics: int
    pstate: int
    reasons: int
    pcie_tx_kbs: int
    pcie_rx_kbs: int
    nvlink_kibs: float
    job: bool


def sample(model: GpuModel, profile: str, seed: int, gpu: int, tick: int, t: float, offset_s: float) -> Sample:
    """Readings of GPU ``gpu`` during ``tick`` (which starts ``t`` seconds after time 0)."""
    ph, cycle = phase_at(profile, t, offset_s)
    n = [noise(seed, gpu, tick, s) for s in range(6)]
    u = ph.load
    if u > 0:
        u = min(1.0, max(0.0, u + (n[0] - 0.5) * 0.08))
    util_gpu = round(u * 100)
    util_mem = round(u * 55 + (n[1] * 8 if u else 0))
    cmax, cidle = model.clocks_max_mhz, model.clocks_idle_mhz
    idle_w, cap_w = model.power_idle_w, model.power_limit_w
    power_w = idle_w + (cap_w - idle_w) * (u**1.3) * 0.97 + (n[2] - 0.5) * (0.04 * cap_w if u else 2.0)
    reasons = 0
    if u == 0:
        reasons |= 0x1  # GpuIdle
    if power_w >= cap_w * 0.95:
        power_w = min(power_w, cap_w * 0.995)
        reasons |= 0x4  # SwPowerCap
    busy = u > 0.02
    sm = cmax["sm"] - (int(n[3] * 8) * 15 if reasons & 0x4 else 0) if busy else cidle["sm"]
    graphics = sm if busy else cidle["graphics"]
    temp_gpu = round(30 + 42 * u + (n[4] - 0.5) * 2)
    temp_mem = temp_gpu + 4 + round(6 * u)
    pcie = ph.pcie_gbs * 1e6 * (0.8 + 0.4 * n[5])  # KB/s
    tx_share = 0.75 if ph.name == "checkpoint" else 0.3
    links = model.nvlink_links
    nvlink = ph.nvlink * links * model.nvlink_link_gbps * 1e9 / 1024 * (0.9 + 0.2 * n[1]) if links else 0.0
    return Sample(
        phase=ph.name,
        cycle=cycle,
        util_gpu=util_gpu,
        util_mem=min(100, util_mem),
        util_enc=0,
        util_dec=0,
        power_mw=int(power_w * 1000),
        temp_gpu=temp_gpu,
        temp_mem=temp_mem,
        clock_sm=sm,
        clock_mem=cmax["memory"] if busy else cidle["memory"],
        clock_graphics=graphics,
        pstate=0 if busy else 5,
        reasons=reasons,
        pcie_tx_kbs=int(pcie * tx_share),
        pcie_rx_kbs=int(pcie * (1 - tx_share)),
        nvlink_kibs=nvlink,
        job=ph.job,
    )
