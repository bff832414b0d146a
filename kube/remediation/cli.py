"""``runtimekit remediate serve|reset-breaker`` (also ``python -m runtimekit.kube.remediation``).

Exit codes, as for ``runtimekit``: 0 success; 2 a usage or configuration mistake (a bad key, a
missing journal folder, no kubeconfig outside a cluster, a --db that is not a journal), reported
as one line on stderr naming the key or flag and the rule; 1 a failure at run time (the port is
taken, another service holds the journal, the journal is locked by another process: found within
journal_file.BUSY_SECONDS, at start; reset-breaker on a journal this user cannot write).
Never a traceback for any of these.

This module imports only the standard library at import time: ``runtimekit.cli`` builds its
parser from here, and the node agent must load neither aiohttp's server nor ``kubernetes``.
"""

from __future__ import annotations

import argparse
import sys
import time

from runtimekit.kube.cli_common import EXIT_FAILURE, EXIT_USAGE, configure_logging, fail


def add_remediate_parser(commands: argparse._SubParsersAction) -> None:
    remediate = commands.add_parser("remediate", help="the Alertmanager webhook receiver that remediates GPU nodes")
    sub = remediate.add_subparsers(dest="remediate_command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="receive alerts and run the remediation ladder")
    serve.add_argument("--config", metavar="FILE", required=True,
                       help="YAML configuration file (deploy/remediation.example.yaml lists every key)")
    serve.set_defaults(handler=run_serve)
    reset = sub.add_parser("reset-breaker", help="close the circuit breaker (a person's decision)")
    reset.add_argument("--db", metavar="PATH", required=True, help="the remediation journal (db_path); must exist")
    reset.set_defaults(handler=run_reset_breaker)



def run_serve(args: argparse.Namespace) -> int:
    import asyncio
    import os
    import sqlite3

    from runtimekit.listener import serve_app
    from runtimekit.schema import ConfigError, parse_listen

    from .config import load
    from .journal_file import JournalError, JournalLocked, hold_journal
    from .server import make_app

    try:
        config = load(args.config)
        app = make_app(config)
        held = hold_journal(config.db_path)  # for the life of the process: one service per journal
    except ConfigError as error:
        return fail(EXIT_USAGE, str(error))
    except JournalLocked as error:  # another service holds it (JournalInUse), or its write lock
        return fail(EXIT_FAILURE, f"db_path: {error}")
    except JournalError as error:  # the lock file cannot be made beside it
        return fail(EXIT_USAGE, f"db_path: {error}")
    configure_logging(config.log_level)
    host, port = parse_listen(config.listen)
    try:
        asyncio.run(serve_app(app, host, port, config.listener))
    except OSError as error:  # the port is taken, say
        return fail(EXIT_FAILURE, f"cannot serve on {config.listen}: {error.strerror or error}")
    except JournalLocked as error:  # taken by another process since it was checked
        return fail(EXIT_FAILURE, f"db_path: {error}")
    except (JournalError, sqlite3.Error) as error:  # opened at start-up: replaced or broken since checked
        return fail(EXIT_FAILURE, f"db_path: cannot use the journal {config.db_path}: {error}")
    finally:
        os.close(held)
    return 0


def run_reset_breaker(args: argparse.Namespace) -> int:
    import sqlite3

    from .journal import reset_breaker
    from .journal_file import JournalError, JournalLocked, JournalUnwritable

    try:
        was_open = reset_breaker(args.db, time.time())
    except (JournalLocked, JournalUnwritable) as error:  # a journal, that this process cannot write now
        return fail(EXIT_FAILURE, f"cannot reset the breaker: {error}")
    except JournalError as error:
        return fail(EXIT_USAGE, f"--db: {error}")
    except sqlite3.Error as error:  # locked by a long transaction, say: nothing was changed
        return fail(EXIT_FAILURE, f"cannot reset the breaker in {args.db}: {error}")
    print("circuit breaker closed" if was_open else "circuit breaker was not open")
    return 0


def main(argv: list[str] | None = None) -> int:
    root = argparse.ArgumentParser(prog="python -m runtimekit.kube.remediation")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_remediate_parser(commands)
    args = root.parse_args(["remediate", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)
