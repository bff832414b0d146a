"""Memory leaks, orphaned memory and ghost GPUs (gpu-faults.md §2.3 "Memory leak / orphans", §7.10).

Faults (severity, action, clears):

- ``memory_orphaned`` (warning, drain_and_reset_gpu, clean_samples): memory no process accounts
  for — ``memory.used`` with no process on the GPU, or ``used`` minus the processes' sum (only when
  every process's usage is readable) — at or above ``orphan_used_bytes`` for ``orphan_samples``
  samples in a row: a leaked or orphaned context; reset the GPU when idle. ``used`` (v2) excludes
  the driver's reserved memory, so the baseline is small.
- ``gpu_ghost_busy`` (warning, drain_and_reset_gpu, clean_samples): utilization at or above
  ``ghost_utilization`` with no process for ``ghost_samples`` samples in a row (a hard-killed job
  left the GPU spinning).
- ``process_memory_growth`` (warning, restart_application, clean_samples): a process's memory grew
  at least ``leak_bytes_per_second`` over both halves of the last ``leak_window_seconds`` — growth
  only while loading and then flat is not a leak. The process is alive, so restarting it frees
  the memory; no reset needed.

Not judged: GPUs in MIG mode for orphans/ghosts (processes in instances may be invisible without
privileges), a GPU whose process listing failed (an empty list then means nothing), and — with
``require_visible_processes`` — any GPU until some process has been seen on the node (a
containerised agent without hostPID sees none, NVIDIA/nvidia-docker#1483). An Unavailable reading
leaves that GPU's counts as they were and raises nothing.

"Memory still held after the pod that owned the device is gone" needs attribution (which pod was
allocated the device, and when it went away), which ``DetectorInput`` does not carry: not done.
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import (
    CLEARS_WHEN_CLEAN,
    DRAIN_AND_RESET_GPU,
    RESTART_APPLICATION,
    WARNING,
    DetectorInput,
    Finding,
)

from ._common import available, clock, finding, gib, is_new_sample, merge, readable_gpus

NAME = "memory_leak"
WINDOW_COVERAGE = 0.75  # the samples must span at least this share of the leak window


def _rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 1024**2:.1f} MiB/s"


def _count(old: dict[str, list[float]], uuid: str, condition: bool | None, at: float,
           fresh: bool) -> list[float] | None:
    """[consecutive samples, first sample time]; None when the condition is false.
    ``condition`` None (unreadable) or a repeated sample (not ``fresh``) keeps the old count."""
    previous = old.get(uuid)
    if condition is None:
        return list(previous) if previous else None
    if not condition:
        return None
    if previous:
        return [previous[0] + (1 if fresh else 0), previous[1]]
    return [1, at]


def _growth(history: list[list[float]], window: float) -> tuple[float, float, float] | None:
    """(overall, first-half, second-half slope in bytes/s) when the history covers the window."""
    if len(history) < 3:
        return None
    (t0, u0), (t1, u1) = history[0], history[-1]
    if t1 - t0 < window * WINDOW_COVERAGE:
        return None
    middle = (t0 + t1) / 2
    inner = history[1:-1]
    tm, um = min(inner, key=lambda s: abs(s[0] - middle))
    if not (t0 < tm < t1):
        return None
    return (u1 - u0) / (t1 - t0), (um - u0) / (tm - t0), (u1 - um) / (t1 - tm)


def memory_leak(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    state = state or {}
    if data.snapshot is None or not data.snapshot.nvml_up:
        return state, []  # nothing was read: keep the counts (the driver detector reports NVML down)
    old_orphan = dict(state.get("orphan") or {})
    old_ghost = dict(state.get("ghost") or {})
    old_procs = state.get("procs") or {}
    gpus = readable_gpus(data.snapshot)
    fresh = is_new_sample(state, data.snapshot)
    visible = bool(state.get("visible")) or any(g.processes for g in gpus)
    judge = visible or not config["require_visible_processes"]
    orphan: dict[str, list[float]] = {}
    ghost: dict[str, list[float]] = {}
    procs: dict[str, dict[str, list[list[float]]]] = {}
    findings: list[Finding] = []
    window = config["leak_window_seconds"]
    horizon = data.now - window

    for gpu in gpus:
        listing_ok = not any(name == "processes" for name, _ in gpu.errors)
        mig = gpu.modes is not None and available(gpu.modes.mig_mode_current) and gpu.modes.mig_mode_current
        idle_list = listing_ok and not gpu.processes and not mig

        used = gpu.memory.used_bytes if gpu.memory is not None else None
        held = [p.used_memory_bytes for p in gpu.processes]
        readable = listing_ok and not mig and available(used) and all(available(h) for h in held)
        # Memory no process accounts for: all of it with no process, else used minus the processes' sum.
        unaccounted = used - sum(held) if readable else 0
        entry = _count(old_orphan, gpu.uuid, unaccounted >= config["orphan_used_bytes"] if readable else None,
                       gpu.sampled_at, fresh)
        if entry:
            orphan[gpu.uuid] = entry
            if judge and readable and entry[0] >= config["orphan_samples"]:  # judged on a readable sample only
                whose = ("with no process on the GPU" if not gpu.processes else
                         f"of which {len(held)} processes hold {gib(sum(held))}, {gib(unaccounted)} held by none")
                findings.append(finding(
                    gpu, "memory_orphaned", WARNING, DRAIN_AND_RESET_GPU,
                    f"{gib(used)} used {whose} for {int(entry[0])} samples since {clock(entry[1])} "
                    f"(threshold {gib(config['orphan_used_bytes'])}, {config['orphan_samples']} samples); "
                    "reset the GPU when idle",
                    CLEARS_WHEN_CLEAN,
                ))

        busy = gpu.utilization.gpu if gpu.utilization is not None else None
        readable = listing_ok and not mig and available(busy)
        entry = _count(old_ghost, gpu.uuid, (idle_list and busy >= config["ghost_utilization"]) if readable else None,
                       gpu.sampled_at, fresh)
        if entry:
            ghost[gpu.uuid] = entry
            if judge and readable and entry[0] >= config["ghost_samples"]:
                findings.append(finding(
                    gpu, "gpu_ghost_busy", WARNING, DRAIN_AND_RESET_GPU,
                    f"GPU {busy:.0%} busy with no process for {int(entry[0])} samples since {clock(entry[1])} "
                    f"(threshold {config['ghost_utilization']:.0%}, {config['ghost_samples']} samples); "
                    "reset the GPU when idle",
                    CLEARS_WHEN_CLEAN,
                ))

        before = old_procs.get(gpu.uuid) or {}
        now_procs: dict[str, list[list[float]]] = {}
        for process in gpu.processes:
            key = str(process.pid)
            history = [list(s) for s in before.get(key, ()) if s[0] >= horizon and s[0] < gpu.sampled_at]
            if available(process.used_memory_bytes):
                history.append([gpu.sampled_at, process.used_memory_bytes])
            if not history:
                continue
            now_procs[key] = history
            growth = _growth(history, window)
            limit = config["leak_bytes_per_second"]
            if growth is not None and min(growth) >= limit:
                (t0, u0), (t1, u1) = history[0], history[-1]
                findings.append(finding(
                    gpu, "process_memory_growth", WARNING, RESTART_APPLICATION,
                    f"PID {process.pid} grew from {gib(u0)} to {gib(u1)} in {t1 - t0:.0f} s "
                    f"({_rate(growth[0])}; {_rate(growth[1])} and {_rate(growth[2])} over the two halves, "
                    f"threshold {_rate(limit)})",
                    CLEARS_WHEN_CLEAN,
                ))
        if now_procs:
            procs[gpu.uuid] = now_procs

    at = data.snapshot.sampled_at if fresh else state.get("at")
    return {"at": at, "visible": visible, "orphan": orphan, "ghost": ghost, "procs": procs}, merge(findings)


memory_leak.name = NAME  # type: ignore[attr-defined]
detector = memory_leak
