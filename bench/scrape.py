#!/usr/bin/env python3
"""Scrape benchmark: Runtime Kit's agent and nvitop-exporter side by side on the same simulated node.

Starts ``runtimekit serve --sim SCENARIO`` with N simulated GPU processes (in P simulated pods
sharing the GPUs, with ``--pods``; attributed through the fake kubelet, CRI and /proc, and judged
by the health checker) and, at the same time, PyPI's nvitop-exporter on a simulated node of the same
scenario and process count (installed below pynvml in its process, ``scripts/nvitop-on-sim``). Both
run the same phases at the same moments, so their figures come from one run on one machine:

1. warm-up, ``--warmup`` seconds: steady state is reached by running long enough — the health
   checker's longest history (the memory-leak detector's ``leak_window_seconds``, 600 s) fills in
   real time; the default full run warms up 630 s. The agent's CPU per sampling cycle is measured
   early in the warm-up and again at its end, to show whether it depends on uptime;
2. idle, ``--idle`` seconds with no scraper at all: CPU share of one core, and the renders the agent
   made (``runtimekit_exposition_renders_total``; must be 0);
3. periodic, ``--periodic`` scrapes at exactly the sampling interval on an absolute schedule, asking
   as Prometheus does (OpenMetrics, gzip): the headline CPU share, renders per scrape (after the
   first three, which teach the agent the period), scrape latency p50 and max;
4. gone, ``--idle`` seconds after that scraper stopped: renders made for a scraper that went away;
5. concurrent, one exporter at a time: ``--concurrency`` clients scraping back to back for
   ``--duration`` seconds: p50/p99 latency, bytes per scrape (plain and gzip).

CPU is CPU time (user + system, clock ticks) over wall time, as a share of one core. The
agent's process also hosts the simulated node, and only part of it stands for the agent:

- **the agent** (``cpu_pct``, ``cpu_idle_pct``, ``cpu_ms_per_cycle_*``, ``cpu_ratio_vs_nvitop``):
  the whole process (psutil, ``/proc/PID/stat``, exited threads included) **minus the simulated
  host's thread** (``/proc/PID/task/TID/stat``; TID from the agent's ``GET /sim/v1/host``). That
  thread runs, with its own event loop, what on a real node the kubelet, the container runtime
  and the kernel do, not the agent: the fake kubelet pod-resources and CRI gRPC servers (their
  handlers and message building) and every write of the simulated /proc tree (the thread asking
  for a new process list waits for it, not counted). **Still counted** as the agent's: the fake
  NVML library and the simulated node's model behind it (it stands in for libnvidia-ml, which
  runs in the agent's process on a real node), the agent's gRPC clients and /proc reads, and
  gRPC core's shared threads (timer, event engine), which serve the agent's clients and the fake
  servers alike — the fake servers' share of those is a small overstatement of the agent's cost;
- **the whole process** (``cpu_process_pct``, ``cpu_idle_process_pct``,
  ``cpu_process_ratio_vs_nvitop``): everything above, the simulated host included;
- **nvitop-exporter**: its whole process, which hosts a simulated node's fake NVML library only
  (no kubelet, CRI or /proc: it does not attribute processes to pods).

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the benchmarks' shared modules, not benchmarks
from ranks import nearest_rank  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

PLAIN = {"Accept-Encoding": "identity"}
# What Prometheus 2.x sends when it scrapes.
PROMETHEUS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
_RENDERS = re.compile(rb'^runtimekit_exposition_renders_total\{trigger="(\w+)"\} (\S+)$', re.MULTILINE)
_SAMPLES = re.compile(rb"^runtimekit_samples_total (\S+)$", re.MULTILINE)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int, tid: int) -> float:
    """CPU seconds (utime + stime) of thread ``tid`` of process ``pid``, from /proc/PID/task/TID/stat."""
    try:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    except FileNotFoundError:
        raise RuntimeError(f"thread {tid} of process {pid} (the simulated host's) is gone: was the simulator "
                           "restarted? Its CPU can no longer be told apart") from None
    fields = stat[stat.rindex(")") + 2:].split()  # fields from the 3rd (state) on: comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # fields 14 (utime) and 15 (stime)


@dataclass
class Figures:
    cpu_early_ms_per_cycle: float = float("nan")  # warm-up, early window
    cpu_steady_ms_per_cycle: float = float("nan")  # end of the warm-up (history full)
    cpu_idle_pct: float = float("nan")  # no scraper
    cpu_idle_process_pct: float = float("nan")  # the same, simulated host included
    renders_idle: float = float("nan")
    cpu_periodic_pct: float = float("nan")  # one scraper at the sampling interval
    cpu_periodic_process_pct: float = float("nan")  # the same, simulated host included
    renders_per_scrape: float = float("nan")
    periodic_p50_ms: float = float("nan")
    periodic_max_ms: float = float("nan")
    renders_gone: float = float("nan")  # after the scraper left
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    scrapes: int = 0
    bytes_plain: int = 0
    bytes_gzip: int = 0
    notes: list[str] = field(default_factory=list)


class Exporter:
    """One exporter process under measurement."""

    def __init__(self, name: str, command: list[str], port: int) -> None:
        self.name = name
        self.url = f"http://127.0.0.1:{port}/metrics"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        self.ps = psutil.Process(self.process.pid)
        self.figures = Figures()
        self.host_thread: int | None = None  # the simulated host's thread (GET /sim/v1/host), if any

    def cpu_both(self) -> tuple[float, float]:
        """(exporter, whole process) CPU seconds: the exporter's leaves the simulated host's thread out."""
        host = thread_cpu(self.ps.pid, self.host_thread) if self.host_thread is not None else 0.0
        times = self.ps.cpu_times()
        process = times.user + times.system
        return process - host, process

    def cpu(self) -> float:
        return self.cpu_both()[0]

    async def find_host_thread(self, session: aiohttp.ClientSession) -> None:
        """The simulated host's thread id, from the agent's simulator control API (None elsewhere)."""
        async with session.get(self.url.replace("/metrics", "/sim/v1/host"), headers=PLAIN) as response:
            if response.status == 404:
                return
            response.raise_for_status()
            thread_id = (await response.json()).get("thread_id")
        if thread_id is None:
            raise RuntimeError(f"{self.name}: the simulated host shares the agent's threads; its CPU cannot be told apart")
        self.host_thread = int(thread_id)
        thread_cpu(self.ps.pid, self.host_thread)  # readable now

    async def wait_ready(self, session: aiohttp.ClientSession, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.stderr()}")
            try:
                async with session.get(self.url, headers=PLAIN) as response:
                    if response.status == 200 and len(await response.read()) > 0:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{self.url} not ready after {timeout} s")

    async def counters(self, session: aiohttp.ClientSession, headers: dict[str, str] = PLAIN) -> tuple[float | None, float | None]:
        """(samples_total, renders_total) from one scrape (None where the exporter has no such metric)."""
        async with session.get(self.url, headers=headers) as response:
            body = await response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
        samples = _SAMPLES.search(body)
        renders = _RENDERS.findall(body)
        return (float(samples.group(1)) if samples else None,
                sum(float(value) for _, value in renders) if renders else None)

    def stderr(self) -> str:
        return self.process.stderr.read()[-4000:] if self.process.stderr is not None else ""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def cycles_cpu(exporter: Exporter, session: aiohttp.ClientSession, seconds: float) -> float:
    """CPU milliseconds per sampling cycle over ``seconds`` (nan without a cycle counter)."""
    before, _ = await exporter.counters(session)
    cpu = exporter.cpu()
    await asyncio.sleep(seconds)
    spent = exporter.cpu() - cpu
    after, _ = await exporter.counters(session)
    return spent * 1000 / (after - before) if before is not None and after is not None and after > before else float("nan")


async def phases(exporter: Exporter, session: aiohttp.ClientSession, args: argparse.Namespace, start: float) -> None:
    """Warm-up, idle, periodic and gone phases, on a schedule shared by both exporters."""
    f = exporter.figures
    loop = asyncio.get_running_loop()
    window = min(20.0, max(2.0, args.warmup / 3))
    f.cpu_early_ms_per_cycle = await cycles_cpu(exporter, session, window)
    await asyncio.sleep(max(0.0, start + args.warmup - window - loop.time()))
    f.cpu_steady_ms_per_cycle = await cycles_cpu(exporter, session, window)

    # Idle: no scraper. The bracketing scrapes render once each (the second is counted out).
    await asyncio.sleep(max(0.0, start + args.warmup + 1.0 - loop.time()))
    _, renders_before = await exporter.counters(session)
    (cpu, cpu_process), wall = exporter.cpu_both(), time.monotonic()
    await asyncio.sleep(args.idle)
    (cpu_now, cpu_process_now), seconds = exporter.cpu_both(), time.monotonic() - wall
    f.cpu_idle_pct = (cpu_now - cpu) / seconds * 100
    f.cpu_idle_process_pct = (cpu_process_now - cpu_process) / seconds * 100
    _, renders_after = await exporter.counters(session)
    if renders_before is not None and renders_after is not None:
        f.renders_idle = renders_after - renders_before - 1

    # Periodic: one scraper at exactly the sampling interval, on an absolute schedule.
    begin = start + args.warmup + args.idle + 3.0
    await asyncio.sleep(max(0.0, begin - loop.time()))
    latencies: list[float] = []
    renders: list[float | None] = []
    (cpu, cpu_process), wall = exporter.cpu_both(), time.monotonic()
    for k in range(args.periodic):
        await asyncio.sleep(max(0.0, begin + k * args.interval - loop.time()))
        started = time.perf_counter()
        async with session.get(exporter.url, headers=PROMETHEUS) as response:
            body = await response.read()
            encoded = response.headers.get("Content-Encoding") == "gzip"
        latencies.append(time.perf_counter() - started)
        found = _RENDERS.findall(gzip.decompress(body) if encoded else body)
        renders.append(sum(float(v) for _, v in found) if found else None)
    (cpu_now, cpu_process_now), seconds = exporter.cpu_both(), time.monotonic() - wall
    f.cpu_periodic_pct = (cpu_now - cpu) / seconds * 100
    f.cpu_periodic_process_pct = (cpu_process_now - cpu_process) / seconds * 100
    f.periodic_p50_ms = statistics.median(latencies) * 1000
    f.periodic_max_ms = max(latencies) * 1000
    first, last = (renders[2], renders[-1]) if len(renders) > 3 else (None, None)
    if first is not None and last is not None:
        f.renders_per_scrape = (last - first) / (len(renders) - 3)

    # Gone: the scraper stopped.
    await asyncio.sleep(args.idle)
    _, renders_gone = await exporter.counters(session)
    if renders_gone is not None and last is not None:
        f.renders_gone = renders_gone - last - 1


async def concurrent(exporter: Exporter, session: aiohttp.ClientSession, args: argparse.Namespace) -> None:
    f = exporter.figures
    async with session.get(exporter.url, headers=PLAIN) as response:
        f.bytes_plain = len(await response.read())
    async with session.get(exporter.url, headers={"Accept-Encoding": "gzip"}) as response:
        body = await response.read()
        f.bytes_gzip = len(body) if response.headers.get("Content-Encoding") == "gzip" else len(gzip.compress(body))
    latencies: list[float] = []
    stop_at = time.monotonic() + args.duration

    async def client() -> None:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            async with session.get(exporter.url, headers=PROMETHEUS) as response:
                await response.read()
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(client() for _ in range(args.concurrency)))
    latencies.sort()
    f.p50_ms = statistics.median(latencies) * 1000
    f.p99_ms = nearest_rank(latencies, 0.99) * 1000
    f.scrapes = len(latencies)


def show(exporter: Exporter) -> None:
    f = exporter.figures
    host = exporter.host_thread is not None
    print(
        f"{exporter.name:<16} CPU/cycle early {f.cpu_early_ms_per_cycle:6.2f} ms, steady {f.cpu_steady_ms_per_cycle:6.2f} ms"
        f" | idle {f.cpu_idle_pct:5.2f}%" + (f" (process {f.cpu_idle_process_pct:.2f}%)" if host else "")
        + f" ({f.renders_idle:g} renders)"
        f" | scraped at the interval {f.cpu_periodic_pct:5.2f}% of a core"
        + (f" (process, simulated host included: {f.cpu_periodic_process_pct:.2f}%)" if host else "")
        + f", {f.renders_per_scrape:.2f} renders/scrape,"
        f" p50 {f.periodic_p50_ms:.2f} ms max {f.periodic_max_ms:.2f} ms"
        f" | after the scraper left: {f.renders_gone:g} renders"
        f" | {args_concurrency} clients: p50 {f.p50_ms:.2f} ms p99 {f.p99_ms:.2f} ms ({f.scrapes} scrapes)"
        f" | {f.bytes_plain} B/scrape ({f.bytes_gzip} B gzip)"
    )


args_concurrency = 4


async def main() -> None:
    global args_concurrency
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="dgx-h100")
    parser.add_argument("--processes", type=int, default=64, help="simulated GPU processes on the node")
    parser.add_argument("--pods", type=int, default=0, help="simulated pods sharing the GPUs (run the processes)")
    parser.add_argument("--warmup", type=float, default=630.0, help="seconds before measuring (steady state: history full)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of the idle and gone phases")
    parser.add_argument("--periodic", type=int, default=60, help="scrapes at exactly the sampling interval")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent scrapers in the last phase")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of concurrent scraping")
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval of both exporters")
    parser.add_argument("--no-nvitop", action="store_true", help="measure Runtime Kit only")
    parser.add_argument("--quick", action="store_true", help="short phases, no steady state: under 30 s")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.idle, args.periodic, args.duration = 3.0, 3.0, 8, 1.5
    args_concurrency = args.concurrency

    python = sys.executable
    exporters = []
    port = free_port()
    exporters.append(Exporter("runtimekit", [
        python, "-m", "runtimekit.cli", "serve", "--sim", args.scenario, "--listen", f"127.0.0.1:{port}",
        "--sim-processes", str(args.processes), "--sim-pods", str(args.pods), "--interval", str(args.interval),
        "--log-level", "warning", "--state-dir", str(ROOT / ".state" / "bench")], port))
    if not args.no_nvitop:
        port = free_port()
        exporters.append(Exporter("nvitop-exporter", [
            python, str(ROOT / "scripts" / "nvitop-on-sim"), "--scenario", args.scenario,
            "--processes", str(args.processes), "--", "--bind-address", "127.0.0.1", "--port", str(port),
            "--interval", str(args.interval)], port))
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            await asyncio.gather(*(e.wait_ready(session) for e in exporters))
            await exporters[0].find_host_thread(session)
            if exporters[0].host_thread is None:
                raise RuntimeError("the agent serves no GET /sim/v1/host: the simulated host's CPU cannot be told apart")
            start = asyncio.get_running_loop().time()
            await asyncio.gather(*(phases(e, session, args, start) for e in exporters))
            for exporter in exporters:
                await concurrent(exporter, session, args)
    except Exception:
        for exporter in exporters:
            if exporter.process.poll() is not None:
                sys.stderr.write(f"{exporter.name} exited; its stderr:\n{exporter.stderr()}\n")
        raise
    finally:
        for exporter in exporters:
            exporter.stop()

    for exporter in exporters:
        show(exporter)
    ours = exporters[0].figures
    result = {
        "scenario": args.scenario,
        "processes": args.processes,
        "pods": args.pods,
        "warmup_s": f"{args.warmup:g}",
        "cpu_pct": f"{ours.cpu_periodic_pct:.2f}",
        "cpu_process_pct": f"{ours.cpu_periodic_process_pct:.2f}",
        "cpu_idle_pct": f"{ours.cpu_idle_pct:.2f}",
        "cpu_idle_process_pct": f"{ours.cpu_idle_process_pct:.2f}",
        "cpu_ms_per_cycle_early": f"{ours.cpu_early_ms_per_cycle:.2f}",
        "cpu_ms_per_cycle_steady": f"{ours.cpu_steady_ms_per_cycle:.2f}",
        "renders_per_scrape": f"{ours.renders_per_scrape:.2f}",
        "renders_idle": f"{ours.renders_idle:g}",
        "renders_after_scraper_left": f"{ours.renders_gone:g}",
        "periodic_p50_ms": f"{ours.periodic_p50_ms:.2f}",
        "periodic_max_ms": f"{ours.periodic_max_ms:.2f}",
        "p50_ms": f"{ours.p50_ms:.2f}",
        "p99_ms": f"{ours.p99_ms:.2f}",
        "bytes_per_scrape": ours.bytes_plain,
        "bytes_per_scrape_gzip": ours.bytes_gzip,
    }
    if len(exporters) > 1:
        theirs = exporters[1].figures
        result.update(
            nvitop_cpu_pct=f"{theirs.cpu_periodic_pct:.2f}",
            nvitop_cpu_idle_pct=f"{theirs.cpu_idle_pct:.2f}",
            nvitop_p50_ms=f"{theirs.p50_ms:.2f}",
            nvitop_bytes_per_scrape=theirs.bytes_plain,
            cpu_ratio_vs_nvitop=f"{ours.cpu_periodic_pct / theirs.cpu_periodic_pct:.3f}",
            cpu_process_ratio_vs_nvitop=f"{ours.cpu_periodic_process_pct / theirs.cpu_periodic_pct:.3f}",
        )
        print(f"CPU scraped at the interval, runtimekit / nvitop-exporter: agent {result['cpu_ratio_vs_nvitop']},"
              f" whole process (simulated host included) {result['cpu_process_ratio_vs_nvitop']}")
    print("RESULT " + " ".join(f"{key}={value}" for key, value in result.items()))


if __name__ == "__main__":
    asyncio.run(main())
