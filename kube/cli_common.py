"""What the container layer's command lines share: the exit codes and the one-line failure."""

from __future__ import annotations

import sys

EXIT_FAILURE = 1  # a failure at run time
EXIT_USAGE = 2  # bad input: a flag, a configuration key, a file


def fail(code: int, message: str) -> int:
    """Print ``message`` as one line on stderr ("runtimekit: error: …" for bad input) and return ``code``."""
    prefix = "runtimekit: error: " if code == EXIT_USAGE else "runtimekit: "
    print(prefix + message, file=sys.stderr)
    return code
