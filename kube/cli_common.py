"""What the container layer's command lines share: the exit codes, the one-line failure, the log
format, and serving until SIGTERM or SIGINT.

Only the standard library is imported here: ``runtimekit.cli`` builds its parser from modules that
import this one, and the agent's command line must not load grpc, aiohttp or the kubernetes client.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

from runtimekit.cli_args import EXIT_FAILURE, EXIT_USAGE  # noqa: F401 - re-exported to the services' commands

#: Where a node-level service finds its node's name without --node-name (a DaemonSet sets it from
#: the downward API: ``valueFrom.fieldRef.fieldPath: spec.nodeName``); either one wins over the
#: configuration file's ``node_name``, whose ConfigMap is every node's.
NODE_NAME_ENV = "NODE_NAME"


def fail(code: int, message: str) -> int:
    """Print ``message`` as one line on stderr ("runtimekit: error: …" for bad input) and return ``code``."""
    prefix = "runtimekit: error: " if code == EXIT_USAGE else "runtimekit: "
    print(prefix + message, file=sys.stderr)
    return code


def configure_logging(level: str) -> None:
    """Log to stderr at ``level`` ("debug" … "error") with time, level and logger name. The services
    log a Kubernetes API fault once; urllib3 (under the kubernetes client) would log each of its own
    quick retries of every try as a warning, so it logs errors only."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def serve_until_signalled(run: Callable[[], Awaitable[None]], stopped: str) -> None:
    """Run ``run()`` in a new event loop until SIGTERM or SIGINT cancels it; then log ``stopped``
    and return. Any other exception propagates for the caller to turn into an exit code."""

    async def serve() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await run()
        except asyncio.CancelledError:
            logging.getLogger(__name__).info(stopped)

    asyncio.run(serve())
