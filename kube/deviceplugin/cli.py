"""``runtimekit device-plugin serve`` (also ``python -m runtimekit.kube.deviceplugin serve``).

Exit codes, as for ``runtimekit``: 0 stopped by SIGTERM or SIGINT; 2 a configuration mistake (a
bad key, a flag, offer_annotation.enabled without a node name or with a kubeconfig that cannot be
used), one line on stderr naming the key and the rule; 1 a failure at run time (a plugin socket
that could not be made, tried again with backoff: service.START_ATTEMPTS times). Never a traceback
for any of these.

This module imports only the standard library at import time: ``runtimekit.cli`` builds its
parser from here, and the agent's command line must not load grpc for it.
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


def add_device_plugin_parser(commands: argparse._SubParsersAction) -> None:
    plugin = commands.add_parser("device-plugin", help="the Kubernetes device plugin: GPUs and MIG devices for the "
                                 "kubelet, placed by the agent's topology (runtimekit.v1)")
    sub = plugin.add_subparsers(dest="device_plugin_command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="register with the kubelet and serve the device plugin API")
    serve.add_argument("--config", metavar="FILE", help="YAML configuration file (docs/deviceplugin.md lists every key)")
    serve.add_argument("--agent-socket", metavar="PATH", help="the agent's API socket (agent_socket)")
    serve.add_argument("--kubelet-socket", metavar="PATH", help="the kubelet's registration socket (kubelet_socket)")
    serve.add_argument("--node-name", metavar="NAME", help=f"this node's name (node_name; default: ${NODE_NAME_ENV})")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from runtimekit.schema import ConfigError

    from ..kubeclient import ClusterAccessError, api_client
    from .config import load
    from .service import DevicePluginService, PluginSocketError

    node_name = args.node_name or os.environ.get(NODE_NAME_ENV) or None  # over the file's: its ConfigMap is every node's
    overrides = {"agent_socket": args.agent_socket, "kubelet_socket": args.kubelet_socket, "log_level": args.log_level,
                 "node_name": node_name}
    try:
        config = load(args.config, overrides)
    except ConfigError as error:
        return fail(EXIT_USAGE, str(error))
    kube_client = None
    if config.offer_annotation.enabled:
        try:
            kube_client = api_client(config.kubernetes.kubeconfig, config.kubernetes.context)
        except ClusterAccessError as error:
            return fail(EXIT_USAGE, str(error))
    configure_logging(config.log_level)
    try:
        serve_until_signalled(lambda: DevicePluginService(config, kube_client).run(), "stopped: the plugin sockets are removed")
    except PluginSocketError as error:  # a plugin socket that could not be made, tries and backoff spent
        return fail(EXIT_FAILURE, f"cannot serve the device plugin in {config.socket_dir}: {error}")
    finally:
        if kube_client is not None:
            kube_client.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    root = argparse.ArgumentParser(prog="python -m runtimekit.kube.deviceplugin")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_device_plugin_parser(commands)
    args = root.parse_args(["device-plugin", *(sys.argv[1:] if argv is None else argv)])
    handler = args.handler
    return int(handler(args))
