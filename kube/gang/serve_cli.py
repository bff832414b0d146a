"""``runtimekit gang serve|plan`` (also ``python -m runtimekit.kube.gang.serve_cli serve``).

Exit codes of ``gang serve``, as for ``runtimekit dra serve``: 0 stopped by SIGTERM or SIGINT; 2 a
configuration mistake (a bad key, a kubeconfig that cannot be used, a web configuration file
``listener.web_config_file`` that is missing, unusable or without a ``tls_server_config`` while
``webhook.listen`` is set), one line on stderr naming the key and the rule; 1 a failure at run time
(the webhook's address cannot be bound). Never a traceback for any of these.

This module imports only the standard library at import time: ``runtimekit.cli`` builds its
parser from here, and the agent's command line must not load aiohttp or the kubernetes client for it.
``gang plan`` is ``plan_cli.add_plan_parser``'s.
"""

from __future__ import annotations

import argparse
import sys

from runtimekit.kube.cli_common import EXIT_FAILURE, EXIT_USAGE, configure_logging, fail, serve_until_signalled


def add_gang_parser(commands: argparse._SubParsersAction) -> None:
    gang = commands.add_parser("gang", help="gang placement: the pods of a JobSet or pod group placed whole, on the "
                               "nodes nearest each other in the network")
    sub = gang.add_subparsers(dest="gang_command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="hold gang pods with a scheduling gate, place each gang whole, release it")
    serve.add_argument("--config", metavar="FILE", help="YAML configuration file (docs/gang.md lists every key)")
    serve.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (kubernetes.kubeconfig; default: in-cluster)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.set_defaults(handler=run_serve)
    from runtimekit.kube.gang.plan_cli import add_plan_parser

    add_plan_parser(sub)


def run_serve(args: argparse.Namespace) -> int:
    from runtimekit.schema import ConfigError

    from ..kubeclient import ClusterAccessError, api_client
    from .config import load
    from .serve import GangService

    try:
        config = load(args.config, {"kubernetes.kubeconfig": args.kubeconfig, "log_level": args.log_level})
        client = api_client(config.kubernetes.kubeconfig, config.kubernetes.context)
        service = GangService(config, client)
    except (ConfigError, ClusterAccessError) as error:
        return fail(EXIT_USAGE, str(error))
    configure_logging(config.log_level)
    try:
        serve_until_signalled(service.run, "stopped")
    except OSError as error:
        return fail(EXIT_FAILURE, f"cannot serve the webhook on {config.webhook.listen}: {error.strerror or error}")
    return 0


def main(argv: list[str] | None = None) -> int:
    root = argparse.ArgumentParser(prog="python -m runtimekit.kube.gang.serve_cli")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_gang_parser(commands)
    args = root.parse_args(["gang", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
