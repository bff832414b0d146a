"""argparse options built from FAULT_KINDS, for ``runtimekit sim inject``.

Each option is read off the parameter's ``runtimekit.schema.Key`` (``ParamSpec.key``): its type,
choices (``allowed``), range (the ``between`` check) and doc; nothing is declared here.

Each distinct parameter becomes one option (``--xid``, ``--link``, ``--rate``, ``--mode``,
``--bytes``, ``--error``, ``--width``, ``--gen``, ``--count``) defaulting to None; the kinds that
use it are named in its help. ``--fault KIND`` (dest ``fault``, default None) is added too.
"""

from __future__ import annotations

import argparse
from typing import Any

from .faults import FAULT_KINDS, FaultError, ParamSpec

__all__ = ["add_fault_arguments", "fault_params_from_args"]


def _params() -> dict[str, tuple[ParamSpec, list[str]]]:
    out: dict[str, tuple[ParamSpec, list[str]]] = {}
    for kind, spec in FAULT_KINDS.items():
        for p in spec.params:
            out.setdefault(p.name, (p, []))[1].append(kind)
    return out


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--fault`` and one ``--NAME`` option per fault parameter (dest ``fault_NAME``)."""
    parser.add_argument(
        "--fault",
        choices=sorted(FAULT_KINDS),
        default=None,
        help="fault kind: " + "; ".join(f"{k}: {s.description}" for k, s in sorted(FAULT_KINDS.items())),
    )
    group = parser.add_argument_group("fault parameters")
    for name, (p, kinds) in _params().items():
        default = "" if p.default is None else f"; default {p.default}"
        group.add_argument(
            f"--{name}",
            dest=f"fault_{name}",
            type=p.type,
            choices=p.choices or None,
            default=None,
            metavar=name.upper() if not p.choices else None,
            help=f"{p.help} ({', '.join(kinds)}): {p.allowed()}{default}",
        )


def fault_params_from_args(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """The parameters of ``kind`` given on the command line (FaultError for one that does not apply)."""
    spec = FAULT_KINDS.get(kind)
    if spec is None:
        raise FaultError(f"fault: unknown kind {kind!r} (allowed: {', '.join(sorted(FAULT_KINDS))})")
    own = {p.name for p in spec.params}
    out: dict[str, Any] = {}
    for name in _params():
        value = getattr(args, f"fault_{name}", None)
        if value is None:
            continue
        if name not in own:
            raise FaultError(f"--{name}: does not apply to {kind} (its parameters: {', '.join(sorted(own)) or 'none'})")
        out[name] = value
    return out
