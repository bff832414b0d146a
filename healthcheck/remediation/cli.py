"""``runtimekit remediate serve|reset-breaker`` (also ``python -m healthcheck.remediation``)."""

from __future__ import annotations

import argparse
import logging
import sys
import time

EXIT_USAGE = 2


def add_remediate_parser(commands: argparse._SubParsersAction) -> None:
    remediate = commands.add_parser("remediate", help="the Alertmanager webhook receiver that remediates GPU nodes")
    sub = remediate.add_subparsers(dest="remediate_command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="receive alerts and run the remediation ladder")
    serve.add_argument("--config", metavar="FILE", required=True, help="YAML configuration file")
    serve.set_defaults(handler=run_serve)
    reset = sub.add_parser("reset-breaker", help="close the circuit breaker (a person's decision)")
    reset.add_argument("--db", metavar="PATH", required=True, help="the remediation journal")
    reset.set_defaults(handler=run_reset_breaker)


def run_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from runtimekit.config import parse_listen

    from .config import load
    from .server import make_app

    try:
        config = load(args.config)
        app = make_app(config)
    except (ValueError, OSError) as error:
        print(f"runtimekit: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host, port = parse_listen(config.listen)
    web.run_app(app, host=host, port=port, print=None, handle_signals=True)
    return 0


def run_reset_breaker(args: argparse.Namespace) -> int:
    from .journal import reset_breaker

    was_open = reset_breaker(args.db, time.time())
    print("circuit breaker closed" if was_open else "circuit breaker was not open")
    return 0


def main(argv: list[str] | None = None) -> int:
    root = argparse.ArgumentParser(prog="python -m healthcheck.remediation")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_remediate_parser(commands)
    args = root.parse_args(["remediate", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)
