"""``runtimekit dra serve`` (also ``python -m runtimekit.kube.dra serve``).

Exit codes, as for ``runtimekit``: 0 stopped by SIGTERM or SIGINT; 2 a configuration mistake (a bad
key, a flag, no node name, a kubeconfig that cannot be used), one line on stderr naming the key and
the rule; 1 a failure at run time (another driver holds the plugin directory, a checkpoint this
version cannot read, a kubelet socket that could not be served). Never a traceback for any of these.

This module imports only the standard library at import time: ``runtimekit.cli`` builds its
parser from here, and the agent's command line must not load grpc or the kubernetes client for it.
"""

from __future__ import annotations

import argparse
import os
import sys

from runtimekit.kube.cli_common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    NODE_NAME_ENV,
    configure_logging,
    fail,
    serve_until_signalled,
)


def add_dra_parser(commands: argparse._SubParsersAction) -> None:
    dra = commands.add_parser("dra", help="the Kubernetes DRA driver: GPUs, TDM shares, MIG slices and NICs "
                              "per ResourceClaim, made by the agent (runtimekit.v1)")
    sub = dra.add_subparsers(dest="dra_command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="register with the kubelet, publish ResourceSlices, prepare claims")
    serve.add_argument("--config", metavar="FILE", help="YAML configuration file (docs/dra.md lists every key)")
    serve.add_argument("--node-name", metavar="NAME", help=f"this node's name (node_name; default: ${NODE_NAME_ENV})")
    serve.add_argument("--agent-socket", metavar="PATH", help="the agent's API socket (agent_socket)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from runtimekit.schema import ConfigError

    from ..kubeclient import ClusterAccessError, api_client
    from .checkpoint import CheckpointError, DriverLocked
    from .config import load
    from .service import DraService, PluginSocketError

    node_name = args.node_name or os.environ.get(NODE_NAME_ENV) or None  # over the file's: its ConfigMap is every node's
    overrides = {"node_name": node_name, "agent_socket": args.agent_socket, "log_level": args.log_level}
    try:
        config = load(args.config, overrides)
    except ConfigError as error:
        return fail(EXIT_USAGE, str(error))
    try:
        client = api_client(config.kubernetes.kubeconfig, config.kubernetes.context)
    except ClusterAccessError as error:
        return fail(EXIT_USAGE, str(error))
    configure_logging(config.log_level)
    try:
        serve_until_signalled(lambda: DraService(config, client).run(), "stopped: the kubelet sockets are removed")
    except DriverLocked as error:
        return fail(EXIT_FAILURE, str(error))
    except CheckpointError as error:
        return fail(EXIT_FAILURE, f"cannot read the checkpoint: {error} (do not delete it to start: without it the "
                                  "driver deletes every slice it made, those of running pods included; see docs/dra.md)")
    except PluginSocketError as error:
        return fail(EXIT_FAILURE, f"cannot serve the kubelet sockets: {error}")
    return 0


def main(argv: list[str] | None = None) -> int:
    root = argparse.ArgumentParser(prog="python -m runtimekit.kube.dra")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_dra_parser(commands)
    args = root.parse_args(["dra", *(sys.argv[1:] if argv is None else argv)])
    handler = args.handler
    return int(handler(args))
