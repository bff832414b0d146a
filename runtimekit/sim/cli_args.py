"""argparse options built from FAULT_KINDS, for ``runtimekit sim inject``; the MIG instance
options of ``sim inject`` (an XID raised in an instance) and ``sim process add``.

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

__all__ = ["add_fault_arguments", "fault_params_from_args", "clear_refusal",
           "add_instance_arguments", "instance_ids_from_args"]


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


def clear_refusal(args: argparse.Namespace) -> str | None:
    """Why ``sim inject --clear`` cannot run as given (None: it can): the control API clears a
    whole kind (or every fault, every link of ``nvlink-down``), so a parameter option (``--link``,
    ``--xid``, ...) would be silently ignored and look honoured."""
    given = [f"--{name}" for name in _params() if getattr(args, f"fault_{name}", None) is not None]
    if not given:
        return None
    spec = FAULT_KINDS.get(args.fault) if args.fault else None
    if spec is None:
        what = "every fault on the GPU"
    else:
        what = f"every {args.fault} fault on the GPU" + (", on all links" if spec.param("link") else "")
    return f"{given[0]}: not used with --clear, which clears {what}"


def add_instance_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--gpu-instance`` and ``--compute-instance`` (dests ``gpu_instance``, ``compute_instance``,
    default None): the MIG instance ``what`` applies to."""
    parser.add_argument("--gpu-instance", type=int, metavar="ID", help=f"MIG GPU instance id {what}")
    parser.add_argument("--compute-instance", type=int, metavar="ID", help=f"MIG compute instance id, inside --gpu-instance, {what}")


def instance_ids_from_args(args: argparse.Namespace) -> dict[str, int]:
    """The instance ids given (``gpu_instance``, ``compute_instance``) for a request body; FaultError
    for a compute instance without its GPU instance."""
    if args.compute_instance is not None and args.gpu_instance is None:
        raise FaultError("--compute-instance: needs --gpu-instance (a compute instance is inside a GPU instance)")
    return {key: getattr(args, key) for key in ("gpu_instance", "compute_instance") if getattr(args, key) is not None}
