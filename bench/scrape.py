#!/usr/bin/env python3
"""Scrape benchmark: Runtime Kit's agent against nvitop-exporter on the same simulated node.

Starts ``runtimekit serve --sim SCENARIO`` with N simulated GPU processes (in P simulated pods
sharing the GPUs, with ``--pods``; attributed through the fake kubelet, CRI and /proc), then:

1. idle phase (no scrapes, I seconds): the agent's CPU seconds per sampling cycle and its CPU
   use as a share of one core, from psutil's process CPU times and the agent's own
   ``runtimekit_samples_total``;
2. scrape phase (C concurrent clients, D seconds, each asking as Prometheus does: OpenMetrics
   preferred, gzip): p50/p99 scrape latency, bytes per scrape (plain and gzip), and the CPU share
   while scraped — most of these scrapes are served from the exposition cache;
3. periodic phase: one scrape per sampling interval, so each is the first to see a new sample
   (the pattern of a Prometheus scrape loop): its median and maximum. The agent learns the period
   and renders ahead of the expected scrape; the first scrape (no period known yet) pays the
   render, and is the maximum.

It then runs PyPI's nvitop-exporter on a simulated node of the same scenario (installed below
pynvml in that process, ``scripts/nvitop-on-sim``) and measures it the same way, so the two
CPU figures come from one run on one machine. The last line is ``RESULT key=value ...``.
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
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Figures:
    cpu_idle_ratio: float  # CPU seconds per wall second while not scraped (share of one core)
    cpu_per_cycle_seconds: float  # idle CPU seconds divided by sampling cycles (nan if unknown)
    cpu_scraped_ratio: float
    p50_ms: float
    p99_ms: float
    scrapes: int
    periodic_p50_ms: float  # a scrape that is the first to see a new sample: it pays the render
    periodic_max_ms: float
    bytes_plain: int
    bytes_gzip: int


async def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status == 200 and len(await response.read()) > 0:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


PLAIN = {"Accept-Encoding": "identity"}
# What Prometheus 2.x sends when it scrapes.
PROMETHEUS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


async def samples_total(session: aiohttp.ClientSession, url: str) -> float | None:
    async with session.get(url, headers=PLAIN) as response:
        text = await response.text()
    match = re.search(r"^runtimekit_samples_total (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


async def periodic_scrapes(session: aiohttp.ClientSession, url: str, count: int, interval: float) -> list[float]:
    """Scrape once per sampling interval (as Prometheus does): each scrape sees a new sample."""
    latencies = []
    for _ in range(count):
        await asyncio.sleep(interval * 1.05)
        started = time.perf_counter()
        async with session.get(url, headers=PROMETHEUS) as response:
            await response.read()
        latencies.append(time.perf_counter() - started)
    return sorted(latencies)


async def measure(url: str, pid: int, *, concurrency: int, duration: float, idle: float, periodic: int,
                  interval: float) -> Figures:
    process = psutil.Process(pid)
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        await asyncio.sleep(2.0)  # let start-up work settle
        cycles_before = await samples_total(session, url)
        cpu_before, wall_before = cpu_seconds(process), time.monotonic()
        await asyncio.sleep(idle)
        cpu_idle, wall_idle = cpu_seconds(process) - cpu_before, time.monotonic() - wall_before
        cycles_after = await samples_total(session, url)
        cycles = (cycles_after - cycles_before) if cycles_before is not None and cycles_after is not None else None

        async with session.get(url, headers=PLAIN) as response:
            plain = len(await response.read())
        async with session.get(url, headers={"Accept-Encoding": "gzip"}) as response:
            body = await response.read()
            packed = len(body) if response.headers.get("Content-Encoding") == "gzip" else len(gzip.compress(body))

        latencies: list[float] = []
        stop_at = time.monotonic() + duration

        async def client() -> None:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                async with session.get(url, headers=PROMETHEUS) as response:
                    await response.read()
                latencies.append(time.perf_counter() - started)

        cpu_before, wall_before = cpu_seconds(process), time.monotonic()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        cpu_scraped, wall_scraped = cpu_seconds(process) - cpu_before, time.monotonic() - wall_before
        periodic_latencies = await periodic_scrapes(session, url, periodic, interval)

    latencies.sort()
    return Figures(
        cpu_idle_ratio=cpu_idle / wall_idle,
        cpu_per_cycle_seconds=cpu_idle / cycles if cycles else float("nan"),
        cpu_scraped_ratio=cpu_scraped / wall_scraped,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        scrapes=len(latencies),
        periodic_p50_ms=statistics.median(periodic_latencies) * 1000,
        periodic_max_ms=periodic_latencies[-1] * 1000,
        bytes_plain=plain,
        bytes_gzip=packed,
    )


def start(command: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def run_one(name: str, command: list[str], url: str, args: argparse.Namespace) -> Figures:
    process = start(command)
    try:
        await wait_ready(url)
        return await measure(url, process.pid, concurrency=args.concurrency, duration=args.duration, idle=args.idle,
                             periodic=args.periodic, interval=args.interval)
    except Exception:
        stop(process)
        sys.stderr.write(f"{name} failed; its stderr:\n{process.stderr.read()[-4000:]}\n")
        raise
    finally:
        stop(process)


def show(name: str, figures: Figures) -> None:
    print(
        f"{name:<16} idle CPU {figures.cpu_idle_ratio * 100:6.2f}% of a core"
        f"  ({figures.cpu_per_cycle_seconds * 1000:7.2f} ms/cycle)"
        f"  scraped CPU {figures.cpu_scraped_ratio * 100:6.1f}%"
        f"  p50 {figures.p50_ms:6.2f} ms  p99 {figures.p99_ms:6.2f} ms  ({figures.scrapes} scrapes)"
        f"  periodic p50 {figures.periodic_p50_ms:6.2f} ms  max {figures.periodic_max_ms:6.2f} ms"
        f"  {figures.bytes_plain} B/scrape ({figures.bytes_gzip} B gzip)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="dgx-h100")
    parser.add_argument("--processes", type=int, default=64, help="simulated GPU processes on the node")
    parser.add_argument("--pods", type=int, default=0, help="simulated pods sharing the GPUs (run the processes)")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent scrapers")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of scraping")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measurement")
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval of both agents")
    parser.add_argument("--periodic", type=int, default=20, help="scrapes one sampling interval apart")
    parser.add_argument("--no-nvitop", action="store_true", help="measure Runtime Kit only")
    parser.add_argument("--quick", action="store_true", help="short phases: finishes in under 30 s")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.idle, args.periodic = 3.0, 4.0, 3

    python = sys.executable
    port = free_port()
    ours = await run_one(
        "runtimekit",
        [python, "-m", "runtimekit.cli", "serve", "--sim", args.scenario, "--listen", f"127.0.0.1:{port}",
         "--sim-processes", str(args.processes), "--sim-pods", str(args.pods), "--interval", str(args.interval), "--log-level", "warning",
         "--state-dir", str(ROOT / ".state" / "bench")],
        f"http://127.0.0.1:{port}/metrics",
        args,
    )
    show("runtimekit", ours)
    result = {
        "scenario": args.scenario,
        "processes": args.processes,
        "pods": args.pods,
        "concurrency": args.concurrency,
        "p50_ms": f"{ours.p50_ms:.2f}",
        "p99_ms": f"{ours.p99_ms:.2f}",
        "periodic_p50_ms": f"{ours.periodic_p50_ms:.2f}",
        "periodic_max_ms": f"{ours.periodic_max_ms:.2f}",
        "bytes_per_scrape": ours.bytes_plain,
        "bytes_per_scrape_gzip": ours.bytes_gzip,
        "cpu_idle_pct": f"{ours.cpu_idle_ratio * 100:.2f}",
        "cpu_ms_per_cycle": f"{ours.cpu_per_cycle_seconds * 1000:.2f}",
        "cpu_scraped_pct": f"{ours.cpu_scraped_ratio * 100:.1f}",
    }
    if not args.no_nvitop:
        port = free_port()
        theirs = await run_one(
            "nvitop-exporter",
            [python, str(ROOT / "scripts" / "nvitop-on-sim"), "--scenario", args.scenario,
             "--processes", str(args.processes), "--", "--bind-address", "127.0.0.1", "--port", str(port),
             "--interval", str(args.interval)],
            f"http://127.0.0.1:{port}/metrics",
            args,
        )
        show("nvitop-exporter", theirs)
        result.update(
            nvitop_p50_ms=f"{theirs.p50_ms:.2f}",
            nvitop_p99_ms=f"{theirs.p99_ms:.2f}",
            nvitop_periodic_p50_ms=f"{theirs.periodic_p50_ms:.2f}",
            nvitop_cpu_idle_pct=f"{theirs.cpu_idle_ratio * 100:.2f}",
            nvitop_bytes_per_scrape=theirs.bytes_plain,
            cpu_ratio_vs_nvitop=f"{ours.cpu_idle_ratio / theirs.cpu_idle_ratio:.3f}",
        )
    print("RESULT " + " ".join(f"{key}={value}" for key, value in result.items()))


if __name__ == "__main__":
    asyncio.run(main())
