"""The text frame ``runtimekit status`` prints for a node document (``GET /api/v1/node``).

A head line (version, node, health, readiness, GPUs, and how old the sample and the attribution
are, ``STALE`` where the agent says so), a table of GPUs with their faults, the slices (quota
against use) and the top GPU processes by memory. Every string from the agent (text a tenant can
choose) is made ``printable`` first, so that no escape sequence reaches the terminal.

Units: memory in GiB (2**30 bytes), utilization in percent, temperature in °C, power in W.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["printable", "render"]

GiB = 1 << 30
BAR_WIDTH = 10
COLOURS = {"healthy": "32", "suspect": "33", "unhealthy": "31", "lost": "31", "recovering": "34", "unknown": "2"}
AGE_UNITS = (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 172800), ("d", 86400, float("inf")))  # unit, size, below


def printable(text: str) -> str:
    """``text`` with each non-printable character (controls, ESC, format characters) escaped as
    ``\\xNN`` or ``\\uNNNN``: what the agent says cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else
                   (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}") for char in text)


def _printable_document(value: Any) -> Any:
    """``value`` (a JSON document) with every string, keys too, made ``printable``."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(key)): _printable_document(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable_document(item) for item in value]
    return value


def _known(value: Any) -> bool:
    return value is not None


def _bar(ratio: float | None) -> str:
    if ratio is None:
        return "[" + " " * BAR_WIDTH + "]"
    filled = round(max(0.0, min(1.0, ratio)) * BAR_WIDTH)
    return "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]"


def _percent(ratio: float | None) -> str:
    return f"{round(ratio * 100)}%" if ratio is not None else "n/a"


def _gib(value: int | None) -> str:
    return f"{value / GiB:.1f}" if value is not None else "n/a"


def _age(seconds: float) -> str:
    """An age for people, as the page writes it: "0.4 s", "42 s", "12 min", "3 h", "2 d"."""
    unit, size = next((unit, size) for unit, size, below in AGE_UNITS if seconds < below)
    return f"{seconds:.1f} s" if seconds < 10 else f"{round(seconds / size)} {unit}"


def _freshness(document: dict[str, Any], paint: _Painter) -> tuple[str, list[str]]:
    """", sample 0.4 s old, attribution 0.5 s old" for the head line, "STALE" after a part the agent
    says is stale, and a warning line for each such part."""
    every = (document.get("agent") or {}).get("sample_interval_seconds")
    every = f" (the agent samples every {every:g} s)" if _known(every) else ""
    warnings = {"sample": "no new GPU sample for {age}" + every + ": the numbers below are the last ones read "
                "(the sampler may be stuck in the driver)",
                "attribution": "processes and pods last attributed {age} ago: they may have changed"}
    head, lines = "", []
    for key, warning in warnings.items():
        part = document.get(key) or {}
        if _known(part.get("age_seconds")):
            age, stale = _age(part["age_seconds"]), part.get("stale") is True
            head += f", {key} {age} old" + (" " + paint("STALE", COLOURS["suspect"]) if stale else "")
            lines += [paint("STALE: " + warning.format(age=age), COLOURS["suspect"])] if stale else []
    return head, lines


def _health(gpu: dict[str, Any]) -> str:
    if gpu.get("health"):
        return str(gpu["health"]["state"])
    return "lost" if gpu.get("lost") else "unknown"


class _Painter:
    """ANSI colours, or none (not a terminal, or NO_COLOR)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and code else text


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], paint: _Painter) -> list[str]:
    """Left-aligned columns two spaces apart; a cell that is a health state (COLOURS) in its colour,
    added after padding so that colours never skew the widths."""
    widths = [max(len(cell) for cell in column) for column in zip(columns, *rows, strict=True)]
    lines = []
    for row in [columns, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("  ".join(paint(cell, COLOURS.get(cell.strip(), "")) for cell in cells).rstrip())
    return lines


def _gpu_lines(document: dict[str, Any], paint: _Painter) -> list[str]:
    rows, faults = [], []
    for gpu in document["gpus"]:
        health = _health(gpu)
        used, total = gpu.get("memory_used_bytes"), gpu.get("memory_total_bytes")
        memory = f"{_bar(used / total if _known(used) and total else None)} {_gib(used)}/{_gib(total)} GiB"
        power = f"{round(gpu['power_watts'])}/{round(gpu['power_limit_watts'] or 0)} W" if _known(gpu.get("power_watts")) else "n/a"
        temperature = f"{round(gpu['temperature_celsius'])} C" if _known(gpu.get("temperature_celsius")) else "n/a"
        mode = (gpu.get("slicer") or {}).get("mode") or ("mig" if gpu.get("mig_enabled") else "-")
        rows.append([str(gpu["index"]), gpu.get("name") or "?", health,
                     f"{_bar(gpu.get('utilization'))} {_percent(gpu.get('utilization')):>4}", memory, temperature, power,
                     mode, str(len(gpu.get("slices", []))), str(len(gpu.get("pods", []))), str(gpu.get("processes_total", 0))])
        for fault in (gpu.get("health") or {}).get("faults", []):
            faults.append(f"  GPU {gpu['index']}: {paint(fault['fault'], COLOURS['unhealthy'])} "
                          f"({fault['severity']}, {fault['action']}): {fault['evidence']}")
    columns = ["GPU", "MODEL", "HEALTH", "UTIL", "MEMORY", "TEMP", "POWER", "MODE", "SLICES", "PODS", "PROCS"]
    lines = _table(columns, rows, paint)
    return lines + (["", "FAULTS", *faults] if faults else [])


def _slice_lines(document: dict[str, Any], paint: _Painter) -> list[str]:
    slices = document.get("slices") or []
    if not slices:
        return ["SLICES: none"]
    rows = []
    for slice_ in slices:
        compute = f"{slice_['compute_percent']}%" if slice_.get("compute_percent") else "any"
        used = slice_.get("used_memory_bytes")
        rows.append([slice_["id"], str(slice_["gpu"]), slice_["mode"] + (f" {slice_['profile']}" if slice_.get("profile") else ""),
                     slice_["state"], slice_.get("health") or "unknown",
                     f"{_percent(slice_.get('utilization'))} / {compute}",
                     f"{_gib(used)} / {_gib(slice_['memory_bytes'])} GiB", slice_.get("owner", "")])
    columns = ["SLICE", "GPU", "MODE", "STATE", "HEALTH", "COMPUTE USE/QUOTA", "MEMORY USE/QUOTA", "OWNER"]
    return ["SLICES", *_table(columns, rows, paint)]


def _process_lines(document: dict[str, Any], top: int, paint: _Painter) -> list[str]:
    found = [(gpu["index"], process) for gpu in document["gpus"] for process in gpu.get("processes", [])]
    found.sort(key=lambda item: -(item[1].get("used_memory_bytes") or 0))
    if not found:
        return ["TOP PROCESSES: none"]
    rows = [[str(index), str(p["pid"]), p.get("name") or "?", f"{_gib(p.get('used_memory_bytes'))} GiB",
             _percent(p.get("sm_utilization")), p.get("container") or "host"] for index, p in found[:top]]
    return [f"TOP PROCESSES (by GPU memory, {min(top, len(found))} of {len(found)} listed)",
            *_table(["GPU", "PID", "NAME", "MEMORY", "SM", "CONTAINER"], rows, paint)]


def render(document: dict[str, Any], *, top: int = 5, colour: bool = False) -> str:
    """The frame ``runtimekit status`` prints for a node document (its strings made ``printable``)."""
    document = _printable_document(document)
    paint = _Painter(colour)
    agent, sample, health = document.get("agent") or {}, document.get("sample"), document.get("health")
    node_health = health["state"] if health else "unknown"
    ready = "ready" if agent.get("ready") else f"not ready ({agent.get('ready_detail', '')})"
    if sample is None:
        gpus = "waiting for the first sample"
    elif not sample.get("nvml_up"):
        gpus = f"NVML unavailable: {sample.get('nvml_error', '')}"
    else:
        gpus = f"{sample.get('device_count')} GPUs, driver {sample.get('driver_version') or 'n/a'}"
    fresh, warnings = _freshness(document, paint)
    head = (f"runtimekit {agent.get('version', '?')} on {agent.get('node', '?')}: node "
            f"{paint(node_health, COLOURS.get(node_health, ''))}, {ready}, {gpus}{fresh}")
    lines = [head, *warnings, "", *_gpu_lines(document, paint), "", *_slice_lines(document, paint), "",
             *_process_lines(document, top, paint)]
    return "\n".join(lines) + "\n"
