"""Driver-side NVML event sets: XIDs and other events queued per set, waited on with a timeout.

One ``threading.Condition`` guards every set; delivery ``notify_all``s, so a waiter in
``nvmlEventSetWait_v2`` wakes within microseconds of an injection. A GPU that falls off the
bus queues one ``LOST`` marker per set holding it: the next wait returns
NVML_ERROR_GPU_IS_LOST once (not forever, so a waiting thread does not spin).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

__all__ = ["EventHub", "Event", "LOST", "NO_INSTANCE"]

LOST = -1  # event type of the "GPU lost" marker
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of an event of the whole GPU


@dataclass(frozen=True, slots=True)
class Event:
    gpu: int
    type: int  # nvmlEventType* bit, or LOST
    data: int  # XID code for nvmlEventTypeXidCriticalError
    gpu_instance: int = NO_INSTANCE  # MIG GPU instance id the event comes from (nvmlEventData_t.gpuInstanceId)
    compute_instance: int = NO_INSTANCE  # MIG compute instance id (nvmlEventData_t.computeInstanceId)


@dataclass
class _Set:
    masks: dict[int, int] = field(default_factory=dict)  # gpu -> registered event type bits
    queue: deque[Event] = field(default_factory=deque)


class EventHub:
    """All event sets of one simulated driver; thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._sets: dict[int, _Set] = {}
        self._next = 1

    def create(self) -> int:
        """A new empty set; returns its id (never 0)."""
        with self._cond:
            sid = self._next
            self._next += 1
            self._sets[sid] = _Set()
            return sid

    def free(self, sid: int) -> bool:
        """Drop a set; False when it does not exist. Wakes its waiters."""
        with self._cond:
            found = self._sets.pop(sid, None) is not None
            self._cond.notify_all()
            return found

    def exists(self, sid: int) -> bool:
        with self._cond:
            return sid in self._sets

    def register(self, sid: int, gpu: int, mask: int) -> bool:
        """Add ``mask`` bits for ``gpu`` to set ``sid``; False when the set does not exist."""
        with self._cond:
            s = self._sets.get(sid)
            if s is None:
                return False
            s.masks[gpu] = s.masks.get(gpu, 0) | mask
            return True

    def deliver(self, gpu: int, etype: int, data: int = 0, *, gpu_instance: int = NO_INSTANCE,
                compute_instance: int = NO_INSTANCE) -> int:
        """Queue an event on every set registered for ``etype`` on ``gpu``; returns how many.

        ``gpu_instance``/``compute_instance``: the MIG instance ids of an event raised inside one.
        """
        with self._cond:
            n = 0
            for s in self._sets.values():
                mask = s.masks.get(gpu)
                if mask is not None and (etype == LOST or mask & etype):
                    s.queue.append(Event(gpu, etype, data, gpu_instance, compute_instance))
                    n += 1
            if n:
                self._cond.notify_all()
            return n

    def wait(self, sid: int, timeout_s: float) -> Event | None:
        """Pop the next event of set ``sid``, waiting up to ``timeout_s``; None on timeout.

        Raises KeyError when the set does not exist (or is freed while waiting).
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while True:
                s = self._sets.get(sid)
                if s is None:
                    raise KeyError(sid)
                if s.queue:
                    return s.queue.popleft()
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
