"""``runtimekit status``: one agent's node at a glance in a terminal — each GPU's health,
utilization, memory, temperature and power, its faults, the slices (quota against use) and the top
GPU processes — read from the agent's ``GET /api/v1/node`` (the document the status page at ``/``
draws, ``runtimekit.statuspage.node_json``). ``--watch`` draws it again every ``--interval``
seconds until Ctrl-C (or ``--iterations`` frames); ``-o json`` prints the document itself.

A secured agent (docs/security.md) is read over HTTPS with ``--ca-file`` (the CA that signed the
agent's certificate) and ``--client-cert``/``--client-key`` (mutual TLS); its basic auth user and
password come from the environment, ``RUNTIMEKIT_USERNAME`` and ``RUNTIMEKIT_PASSWORD`` (never a
flag: a command line is visible to every user of the machine).

The head line says how old the sample and the attribution are by the agent's clock (``age_seconds``),
and ``STALE`` with a warning line where the agent says a part is older than a few sampling intervals.

Every string from the agent (process, container and pod names, fault evidence: text a tenant can
choose) is shown with its non-printable characters escaped (``\\x1b`` for ESC), so that no escape
sequence in it reaches the terminal.

Units: memory in GiB (2**30 bytes), utilization in percent, temperature in °C, power in W.
Colours only on a terminal (and never with ``NO_COLOR`` set). Exit codes, as ``runtimekit.cli``'s:
0 done; 1 the agent unreachable or its answer unreadable (one line that says so; under ``--watch``,
the last frame's fetch failed); 2 bad usage (a TLS file that cannot be used, half of the credentials).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from runtimekit import config as config_module
from runtimekit.cli_args import EXIT_FAILURE, EXIT_USAGE, count, seconds

__all__ = ["add_status_parser", "fetch_node", "render"]

USERNAME_VARIABLE, PASSWORD_VARIABLE = "RUNTIMEKIT_USERNAME", "RUNTIMEKIT_PASSWORD"
NODE_PATH = "/api/v1/node"
GiB = 1 << 30
BAR_WIDTH = 10
COLOURS = {"healthy": "32", "suspect": "33", "unhealthy": "31", "lost": "31", "recovering": "34", "unknown": "2"}
CLEAR = "\x1b[H\x1b[2J"
AGE_UNITS = (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 172800), ("d", 86400, float("inf")))  # unit, size, below


class StatusError(Exception):
    """The agent could not be read: the message says where and why, in one line."""


class UsageError(Exception):
    """The command cannot run as asked: the message names the flag or variable and the rule."""


@dataclass(frozen=True, slots=True)
class Access:
    """How to reach the agent: the TLS context for https (None: Python's default, the system's
    roots) and the ``Authorization`` header (None: none)."""

    ssl_context: ssl.SSLContext | None = None
    authorization: str | None = None


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


def agent_address(text: str) -> str:
    """``--address``: ``http(s)://HOST[:PORT][/PATH]``, or ``HOST:PORT``; the rule it breaks otherwise
    (never echoing credentials written into it)."""
    if not text.isprintable():
        raise argparse.ArgumentTypeError(f"must not hold control characters, got '{printable(text)}'")
    try:
        parts = urllib.parse.urlsplit(text if "://" in text else f"http://{text}")
        port = parts.port
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"must be an http(s) URL or HOST:PORT ({error}), got {text!r}") from None
    if parts.username is not None or parts.password is not None:
        raise argparse.ArgumentTypeError(f"must not hold credentials (set {USERNAME_VARIABLE} and {PASSWORD_VARIABLE})")
    if parts.scheme not in ("http", "https"):
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL, got {text!r}")
    if not parts.hostname:
        raise argparse.ArgumentTypeError(f"must name a host, got {text!r}")
    if port == 0:
        raise argparse.ArgumentTypeError(f"port must be 1-65535, got {text!r}")
    if parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"must not hold a query or fragment, got {text!r}")
    return text


def add_status_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``status`` on the root parser's subcommands."""
    status = commands.add_parser("status", help="one agent's node at a glance: GPUs, health, slices, top processes")
    status.add_argument("--address", type=agent_address, default=f"http://127.0.0.1:{config_module.DEFAULT_PORT}", metavar="URL",
                        help=f"the agent's HTTP address (default http://127.0.0.1:{config_module.DEFAULT_PORT}; "
                        "HOST:PORT is read as http://HOST:PORT)")
    status.add_argument("--watch", action="store_true", help="draw again every --interval seconds until Ctrl-C")
    status.add_argument("--interval", type=seconds, default=2.0, metavar="SECONDS",
                        help="seconds between frames with --watch (default 2)")
    status.add_argument("--iterations", type=count, default=None, metavar="N",
                        help="with --watch, stop after N frames (default: until Ctrl-C)")
    status.add_argument("--top", type=count, default=5, metavar="N", help="GPU processes to list (default 5)")
    status.add_argument("--timeout", type=seconds, default=5.0, metavar="SECONDS",
                        help="give up on one fetch after this long (default 5)")
    status.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="output format (default table; json: the agent's /api/v1/node document)")
    tls = status.add_argument_group("a secured agent (basic auth: the environment variables "
                                    f"{USERNAME_VARIABLE} and {PASSWORD_VARIABLE})")
    tls.add_argument("--ca-file", metavar="PEM", help="verify the agent's certificate with this CA "
                     "(HOST:PORT is then read as https://HOST:PORT)")
    tls.add_argument("--client-cert", metavar="PEM", help="present this client certificate (mutual TLS)")
    tls.add_argument("--client-key", metavar="PEM", help="its private key (default: in --client-cert)")
    status.set_defaults(handler=_run_status)


def node_url(address: str, scheme: str = "http") -> str:
    """The document's URL from ``--address``: a URL, or HOST:PORT taken as ``scheme``."""
    base = address if "://" in address else f"{scheme}://{address}"
    return base.rstrip("/") + NODE_PATH


def access_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Access:
    """The TLS context and credentials that the flags and ``environ`` ask for; ``UsageError``
    naming the flag or variable when they cannot be used."""
    context = None
    if args.client_key and not args.client_cert:
        raise UsageError("--client-key: needs --client-cert")
    if args.ca_file or args.client_cert:
        try:
            context = ssl.create_default_context(cafile=args.ca_file)
        except (OSError, ssl.SSLError) as error:
            raise UsageError(f"--ca-file: cannot use {args.ca_file}: {_reason(error)}") from None
        if args.client_cert:
            try:
                context.load_cert_chain(args.client_cert, args.client_key)
            except (OSError, ssl.SSLError) as error:
                raise UsageError(f"--client-cert: cannot use {args.client_cert}"
                                 f"{' with ' + args.client_key if args.client_key else ''}: {_reason(error)}") from None
    user, password = environ.get(USERNAME_VARIABLE), environ.get(PASSWORD_VARIABLE)
    if (user is None) != (password is None):
        raise UsageError(f"{USERNAME_VARIABLE} and {PASSWORD_VARIABLE}: set both or neither")
    authorization = None
    if user is not None and password is not None:
        if ":" in user:
            raise UsageError(f"{USERNAME_VARIABLE}: a basic auth user name cannot hold ':'")
        authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return Access(context, authorization)


def _reason(error: OSError | ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason)
    return error.strerror or str(error)


def fetch_node(url: str, timeout: float, access: Access = Access()) -> dict[str, Any]:
    """The agent's node document; ``StatusError`` naming the URL and the cause otherwise."""
    request = urllib.request.Request(url, headers={"Authorization": access.authorization} if access.authorization else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=access.ssl_context) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        hint = ""
        if error.code == 401:
            hint = (f" (set {USERNAME_VARIABLE} and {PASSWORD_VARIABLE})" if access.authorization is None
                    else f" (check {USERNAME_VARIABLE} and {PASSWORD_VARIABLE})")
        raise StatusError(f"the agent at {url} answered HTTP {error.code} {error.reason}{hint}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise StatusError(f"cannot reach the agent at {url}: {reason}") from None
    try:
        document = json.loads(body)
    except ValueError as error:
        raise StatusError(f"the agent at {url} answered something that is not JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("gpus"), list):
        raise StatusError(f"the agent at {url} answered JSON without a gpus list (not a runtimekit agent?)")
    return document


# -- drawing --------------------------------------------------------------------------------------


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


# -- the command ----------------------------------------------------------------------------------


def _read(url: str, args: argparse.Namespace, colour: bool) -> str:
    """Fetch the document and show it as ``-o`` asks: the frame, or the JSON (one line per frame
    under ``--watch``; ``json.dumps`` escapes every control character); ``StatusError`` when it
    cannot be read or drawn."""
    document = fetch_node(url, args.timeout, args.access)
    if args.output == "json":
        return json.dumps(document, sort_keys=True) + "\n" if args.watch else json.dumps(document, indent=2, sort_keys=True) + "\n"
    try:
        return render(document, top=args.top, colour=colour)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StatusError(f"the agent at {url} answered a document this command cannot draw "
                          f"({type(error).__name__}: {error}; another version of runtimekit?)") from None


def _frame(args: argparse.Namespace, url: str, out: TextIO, colour: bool, last: bool) -> bool:
    """Fetch and print one ``--watch`` frame; False (said on stderr) when the agent could not be read."""
    try:
        text = _read(url, args, colour)
    except StatusError as error:
        retry = "" if last else f"; trying again in {args.interval:g} s"
        print(f"runtimekit: error: {printable(str(error))}{retry}", file=sys.stderr)
        return False
    if args.output != "json":
        text = (CLEAR if out.isatty() else "") + f"every {args.interval:g} s, at {time.strftime('%H:%M:%S')} (Ctrl-C to stop)\n{text}\n"
    out.write(text)
    out.flush()
    return True


def _run_status(args: argparse.Namespace) -> int:
    try:
        args.access = access_from(args, os.environ)
    except UsageError as error:
        print(f"runtimekit status: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.iterations is not None and not args.watch:
        print("runtimekit status: error: --iterations: only with --watch", file=sys.stderr)
        return EXIT_USAGE
    url = node_url(args.address, "https" if args.access.ssl_context is not None else "http")
    out = sys.stdout
    colour = out.isatty() and not os.environ.get("NO_COLOR")
    if not args.watch:
        try:
            out.write(_read(url, args, colour))
        except StatusError as error:
            print(f"runtimekit: error: {printable(str(error))}", file=sys.stderr)
            return EXIT_FAILURE
        return 0
    frames, ok = 0, True
    try:
        while args.iterations is None or frames < args.iterations:
            if frames:
                time.sleep(args.interval)
            frames += 1
            ok = _frame(args, url, out, colour, last=frames == args.iterations)
    except KeyboardInterrupt:
        pass
    return 0 if ok else EXIT_FAILURE
