"""``runtimekit device-plugin serve`` (also ``python -m runtimekit.kube.deviceplugin serve``).

Exit codes, as for ``runtimekit``: 0 stopped by SIGTERM or SIGINT; 2 a configuration mistake (a
bad key, a flag), one line on stderr naming the key and the rule; 1 a failure at run time (a
plugin socket that could not be made, tried again with backoff: service.START_ATTEMPTS times). Never a traceback for any of these.

This module imports only the standard library at import time: ``runtimekit.cli`` builds its
parser from here, and the agent's command line must not load grpc for it.
"""

from __future__ import annotations

import argparse
import logging
import sys

from runtimekit.kube.cli_common import EXIT_FAILURE, EXIT_USAGE, fail


def add_device_plugin_parser(commands: argparse._SubParsersAction) -> None:
    plugin = commands.add_parser("device-plugin", help="the Kubernetes device plugin: GPUs and MIG devices for the "
                                 "kubelet, placed by the agent's topology (runtimekit.v1)")
    sub = plugin.add_subparsers(dest="device_plugin_command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="register with the kubelet and serve the device plugin API")
    serve.add_argument("--config", metavar="FILE", help="YAML configuration file (docs/deviceplugin.md lists every key)")
    serve.add_argument("--agent-socket", metavar="PATH", help="the agent's API socket (agent_socket)")
    serve.add_argument("--kubelet-socket", metavar="PATH", help="the kubelet's registration socket (kubelet_socket)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.set_defaults(handler=run_serve)



def run_serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from runtimekit.schema import ConfigError

    from .config import load
    from .service import DevicePluginService, PluginSocketError

    overrides = {"agent_socket": args.agent_socket, "kubelet_socket": args.kubelet_socket, "log_level": args.log_level}
    try:
        config = load(args.config, overrides)
    except ConfigError as error:
        return fail(EXIT_USAGE, str(error))
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)

    async def serve() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await DevicePluginService(config).run()
        except asyncio.CancelledError:
            logging.getLogger(__name__).info("stopped: the plugin sockets are removed")

    try:
        asyncio.run(serve())
    except PluginSocketError as error:  # a plugin socket that could not be made, tries and backoff spent
        return fail(EXIT_FAILURE, f"cannot serve the device plugin in {config.socket_dir}: {error}")
    return 0


def main(argv: list[str] | None = None) -> int:
    root = argparse.ArgumentParser(prog="python -m runtimekit.kube.deviceplugin")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_device_plugin_parser(commands)
    args = root.parse_args(["device-plugin", *(sys.argv[1:] if argv is None else argv)])
    handler = args.handler
    return int(handler(args))
