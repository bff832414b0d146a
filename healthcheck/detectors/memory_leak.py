"""Memory leaks, orphaned memory and ghost GPUs (gpu-faults.md §2.3 "Memory leak / orphans", §7.10).

Faults (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``memory_orphaned`` (warning, drain_and_reset_gpu, clean_samples): memory no process accounts
  for — ``memory.used`` with no process on the GPU, or ``used`` minus the processes' sum (only when
  every process's usage is readable) — at or above ``orphan_used_bytes`` without a break for
  ``orphan_seconds``: a leaked or orphaned context; reset the GPU when idle. ``used`` (v2)
  excludes the driver's reserved memory, so the baseline is small.
- ``gpu_ghost_busy`` (warning, drain_and_reset_gpu, clean_samples): utilization at or above
  ``ghost_utilization`` with no process for ``ghost_seconds`` (a hard-killed job left the GPU
  spinning).
- ``process_memory_growth`` (warning, restart_application, clean_samples): a process's memory grew
  at least ``leak_bytes_per_second`` over both halves of the last ``leak_window_seconds`` — growth
  only while loading and then flat is not a leak. The process is alive, so restarting it frees
  the memory; no reset needed.

Durations are measured on sample times (two readings at least), never counted in samples.

Cost: one evaluation is linear in the number of processes and independent of uptime, history
length and sampling rate. A process's history is not a list of samples but at most
``BUCKETS + 1`` time buckets of ``leak_window_seconds / BUCKETS`` seconds, each keeping only its
first and last reading and a count (``[bucket, t first, used first, t last, used last, readings]``);
a new reading updates the newest bucket or starts one, buckets older than the window drop off
the front. The growth test reads the oldest and newest readings and the bucket edge nearest the
middle of the span, so the verdicts match a full history to within half a bucket (19 s of a
600 s window). The state carried between evaluations is bounded per process.

Not judged: GPUs in MIG mode for orphans/ghosts (processes in instances may be invisible without
privileges), a GPU whose process listing failed (an empty list then means nothing), and — with
``require_visible_processes`` — any GPU until some process has been seen on the node (a
containerised agent without hostPID sees none, NVIDIA/nvidia-docker#1483). An Unavailable reading
leaves that GPU's counts as they were, raises nothing and clears nothing raised before
(``unjudged``); orphaned memory or a ghost seen again but not yet for its threshold starts the
clean-sample count of what it raised before again (``seen_again``).

"Memory still held after the pod that owned the device is gone" needs attribution (which pod was
allocated the device, and when it went away), which ``DetectorInput`` does not carry: not done.
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import (
    available,
    clock,
    extend_run,
    finding,
    gib,
    held_for,
    is_new_sample,
    merge,
    readable_gpus,
    seen_again,
    unjudged,
    value_of,
)

NAME = "memory_leak"
WINDOW_COVERAGE = 0.75  # the samples must span at least this share of the leak window
BUCKETS = 16  # time buckets per leak window: the bound on a process's history
Bucket = tuple[int, float, float, float, float, int]  # (bucket, t first, used first, t last, used last, readings)


def _rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 1024**2:.1f} MiB/s"


def _record(history: Any, at: float, used: float, width: float, horizon: float) -> tuple[Bucket, ...]:
    """``history`` (buckets, oldest first) with one more reading; buckets wholly before
    ``horizon`` dropped. O(BUCKETS): never proportional to the number of readings."""
    number = int(at // width)
    if not (type(history) is tuple and history and history[0][3] >= horizon):
        # Buckets to drop, or read back from JSON (lists); a tuple with nothing to drop (the usual
        # case, every sample) is extended as it is.
        history = tuple(tuple(b) for b in history if b[3] >= horizon)
    if history:
        last = history[-1]
        if last[3] >= at:  # this reading is recorded already (an XID-only evaluation)
            return history
        if last[0] == number:  # the newest bucket goes on
            return (*history[-(BUCKETS + 1):-1], (number, last[1], last[2], at, used, int(last[5]) + 1))
    return (*history[-BUCKETS:], (number, at, used, at, used, 1))


def _growth(history: tuple[Bucket, ...], window: float) -> tuple[tuple[float, float], tuple[float, float],
                                                                   tuple[float, float, float]] | None:
    """((t0, u0), (t1, u1), (overall, first-half, second-half slope in bytes/s)) when the readings
    cover the window; the middle point is the bucket edge nearest the middle of the span."""
    if sum(int(b[5]) for b in history) < 3:
        return None
    t0, u0 = history[0][1], history[0][2]
    t1, u1 = history[-1][3], history[-1][4]
    if t1 - t0 < window * WINDOW_COVERAGE:
        return None
    middle = (t0 + t1) / 2
    edges = [(b[1], b[2]) for b in history] + [(b[3], b[4]) for b in history]
    inner = [(t, u) for t, u in edges if t0 < t < t1]
    if not inner:
        return None
    tm, um = min(inner, key=lambda s: abs(s[0] - middle))
    return (t0, u0), (t1, u1), ((u1 - u0) / (t1 - t0), (um - u0) / (tm - t0), (u1 - um) / (t1 - tm))


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
    visible = bool(state.get("visible")) or any(g.processes for _, g in gpus)
    judge = visible or not config["require_visible_processes"]
    orphan: dict[str, list[float]] = {}
    ghost: dict[str, list[float]] = {}
    procs: dict[str, dict[str, tuple[Bucket, ...]]] = {}
    findings: list[Finding] = []
    window = config["leak_window_seconds"]
    width = window / BUCKETS
    limit = config["leak_bytes_per_second"]

    for uuid, gpu in gpus:
        listing_ok = not any(name == "processes" for name, _ in gpu.errors)
        mig = gpu.modes is not None and available(gpu.modes.mig_mode_current) and gpu.modes.mig_mode_current
        idle_list = listing_ok and not gpu.processes and not mig
        now = gpu.sampled_at

        used = value_of(gpu.memory.used_bytes) if gpu.memory is not None else None
        held = [value for p in gpu.processes if (value := value_of(p.used_memory_bytes)) is not None]
        readable = listing_ok and not mig and used is not None and len(held) == len(gpu.processes)
        # Memory no process accounts for: all of it with no process, else used minus the processes' sum.
        unaccounted = used - sum(held) if readable and used is not None else 0
        run = None if mig else extend_run(old_orphan.get(uuid),
                                          unaccounted >= config["orphan_used_bytes"] if readable else None, now, fresh)
        if run:
            orphan[uuid] = run
            if judge and readable and used is not None and held_for(run, now, config["orphan_seconds"]):  # judged on a readable sample
                whose = ("with no process on the GPU" if not gpu.processes else
                         f"of which {len(held)} processes hold {gib(sum(held))}, {gib(unaccounted)} held by none")
                findings.append(finding(
                    gpu, "memory_orphaned",
                    f"{gib(used)} used {whose} since {clock(run[0])} ({now - run[0]:.0f} s; threshold "
                    f"{gib(config['orphan_used_bytes'])} for {config['orphan_seconds']:g} s); reset the GPU when idle",
                ))
        if not mig and not readable:
            findings.extend(unjudged(gpu, ("memory_orphaned",), "memory used or the processes' memory unreadable"))
        elif run and readable:
            findings.extend(seen_again(gpu, ("memory_orphaned",), "memory no process accounts for, seen again"))

        busy = value_of(gpu.utilization.gpu) if gpu.utilization is not None else None
        readable = listing_ok and not mig and busy is not None
        run = None if mig else extend_run(old_ghost.get(uuid), (idle_list and busy >= config["ghost_utilization"])
                                          if busy is not None and readable else None, now, fresh)
        if run:
            ghost[uuid] = run
            if judge and readable and busy is not None and held_for(run, now, config["ghost_seconds"]):
                findings.append(finding(
                    gpu, "gpu_ghost_busy",
                    f"GPU {busy:.0%} busy with no process since {clock(run[0])} ({now - run[0]:.0f} s; threshold "
                    f"{config['ghost_utilization']:.0%} for {config['ghost_seconds']:g} s); reset the GPU when idle",
                ))
        if not mig and not readable:
            findings.extend(unjudged(gpu, ("gpu_ghost_busy",), "utilization or the process listing unreadable"))
        elif run and readable:
            findings.extend(seen_again(gpu, ("gpu_ghost_busy",), "busy with no process, seen again"))
        if not listing_ok:
            findings.extend(unjudged(gpu, ("process_memory_growth",), "process listing failed"))

        before = old_procs.get(uuid) or {}
        now_procs: dict[str, tuple[Bucket, ...]] = {}
        for process in gpu.processes:
            key = str(process.pid)
            history = before.get(key, ())
            process_used = value_of(process.used_memory_bytes)
            if process_used is not None:
                history = _record(history, now, float(process_used), width, data.now - window)
            if not history:
                continue
            now_procs[key] = history
            if history[-1][4] - history[0][2] < limit * (history[-1][3] - history[0][1]):
                continue  # not growing at the limit overall: no half can be both (the usual case)
            growth = _growth(history, window)
            if growth is not None and min(growth[2]) >= limit:
                (t0, u0), (t1, u1), slopes = growth
                findings.append(finding(
                    gpu, "process_memory_growth",
                    f"PID {process.pid} grew from {gib(u0)} to {gib(u1)} in {t1 - t0:.0f} s "
                    f"({_rate(slopes[0])}; {_rate(slopes[1])} and {_rate(slopes[2])} over the two halves, "
                    f"threshold {_rate(limit)})",
                ))
        if now_procs:
            procs[uuid] = now_procs

    at = data.snapshot.sampled_at if fresh else state.get("at")
    return {"at": at, "visible": visible, "orphan": orphan, "ghost": ghost, "procs": procs}, merge(findings)


memory_leak.name = NAME  # type: ignore[attr-defined]
detector = memory_leak
