"""What every ``runtimekit`` command shares: its exit codes and the argument types of its flags.

Exit codes: 0 success; 1 a runtime failure (an agent unreachable, say); 2 bad usage or
configuration (the message names the flag or key and the rule); 141 the reader of the output went
away (``runtimekit slice list | head``): 128 + SIGPIPE, what a shell reports for ``cat`` then.
"""

from __future__ import annotations

import argparse
import math

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_OUTPUT_CLOSED = 141

#: The longest wait a flag takes, in seconds (one day): beyond it, the clocks and deadlines the
#: commands hand the value to (``time.sleep``, socket and gRPC deadlines) overflow or misbehave.
MAX_SECONDS = 86400.0


def seconds(text: str) -> float:
    """A duration flag: a finite number of seconds above 0 and at most ``MAX_SECONDS``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_SECONDS:g}, got {text}")
    return value


def count(text: str) -> int:
    """A count flag: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value
