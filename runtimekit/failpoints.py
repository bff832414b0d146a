"""Failpoints: named places where a test makes the process die, to prove crash recovery.

``failpoint(name)`` SIGKILLs the process (no cleanup, no flush: what a power cut or the OOM killer
leaves) when the environment variable ``RUNTIMEKIT_FAILPOINTS`` (comma-separated names, read once
at import) names it; anywhere else it does nothing. Names are "<room>.<operation>.<step>", e.g.
``slicer.create.journaled`` or ``slicer.delete.gpu_instance``: the step just done.
"""

from __future__ import annotations

import os
import signal

__all__ = ["failpoint", "ENV"]

ENV = "RUNTIMEKIT_FAILPOINTS"
_ARMED = frozenset(name.strip() for name in os.environ.get(ENV, "").split(",") if name.strip())


def failpoint(name: str) -> None:
    """Die here (SIGKILL to this process) when ``name`` is armed in ``RUNTIMEKIT_FAILPOINTS``."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
