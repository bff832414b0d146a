"""``runtimekit status``: one agent's node at a glance in a terminal — each GPU's health,
utilization, memory, temperature and power, its faults, the slices (quota against use) and the top
GPU processes — read from the agent's ``GET /api/v1/node`` (the document the status page at ``/``
draws, ``runtimekit.statuspage.node_json``). ``--watch`` draws it again every ``--interval``
seconds until Ctrl-C (or ``--iterations`` frames); ``-o json`` prints the document itself.

A secured agent (docs/security.md) is read over HTTPS with ``--ca-file`` (the CA that signed the
agent's certificate) and ``--client-cert``/``--client-key`` (mutual TLS); its basic auth user and
password come from the environment, ``RUNTIMEKIT_USERNAME`` and ``RUNTIMEKIT_PASSWORD`` (never a
flag: a command line is visible to every user of the machine). No redirect is followed (the agent
never sends one; following it would send the password wherever the ``Location`` points).

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from runtimekit import config as config_module
from runtimekit.cli_args import EXIT_FAILURE, EXIT_USAGE, count, seconds
from runtimekit.status_frame import printable, render

__all__ = ["add_status_parser", "fetch_node"]

USERNAME_VARIABLE, PASSWORD_VARIABLE = "RUNTIMEKIT_USERNAME", "RUNTIMEKIT_PASSWORD"
NODE_PATH = "/api/v1/node"
CLEAR = "\x1b[H\x1b[2J"


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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: the 3xx answer is then an ``HTTPError``. The agent never redirects, and
    urllib's own handler would send the ``Authorization`` header on to any host the ``Location``
    names (https to http too), so a wrong or spoofed ``--address`` would hand over the password."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


def fetch_node(url: str, timeout: float, access: Access = Access()) -> dict[str, Any]:
    """The agent's node document; ``StatusError`` naming the URL and the cause otherwise (a
    redirect too, naming where it points: it is not followed)."""
    request = urllib.request.Request(url, headers={"Authorization": access.authorization} if access.authorization else {})
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=access.ssl_context), _NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        location = error.headers.get("Location")
        if 300 <= error.code < 400 and location is not None:
            raise StatusError(
                f"the agent at {url} answered a redirect (HTTP {error.code}) to {location}; runtimekit status "
                "follows no redirect (an agent never sends one: is --address right?)") from None
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
