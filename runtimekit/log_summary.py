"""Events logged once per kind, then counted and summarised: what keeps a client that sends garbage
in a loop, or a condition that repeats every millisecond, from flooding the log (used by
``runtimekit.listener`` for client errors and the connection cap)."""

from __future__ import annotations

import logging


class EventSummary:
    """Events logged once per kind, then counted: a client sending garbage in a loop costs one line
    per kind and summary, not one per request. Time is the caller's: it calls ``flush`` every
    summary interval while ``note`` or ``flush`` says that counts are pending."""

    def __init__(self, logger: logging.Logger, what: str, level: int, interval_seconds: float) -> None:
        self._log, self._what, self._level, self._interval = logger, what, level, interval_seconds
        self._counts: dict[str, int] = {}  # kinds seen since the last quiet interval -> events not logged

    def note(self, kind: str, detail: str) -> bool:
        """Record one event; True when it is the first of its kind (logged now, a flush is due)."""
        if kind in self._counts:
            self._counts[kind] += 1
            return False
        self._counts[kind] = 0
        self._log.log(self._level, "%s: %s: %s (more of this kind are counted, summarised every %.0f s)",
                self._what, kind, detail, self._interval)
        return True

    def flush(self) -> bool:
        """Log one line of the events counted since the last flush and forget the kinds that had
        none (their next event is logged in full again); True while kinds are still counted."""
        counted = {kind: n for kind, n in self._counts.items() if n}
        if counted:
            listed = ", ".join(f"{kind}: {n}" for kind, n in sorted(counted.items()))
            self._log.log(self._level, "%s in the last %.0f s: %s", self._what, self._interval, listed)
        self._counts = dict.fromkeys(counted, 0)
        return bool(counted)
