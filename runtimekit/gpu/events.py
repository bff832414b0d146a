"""XID events: threads blocked in nvmlEventSetWait, as the driver delivers them.

One event set per GPU, each waited on by its own thread, registered for NVML's XidCriticalError
event on every GPU that supports it; each event reaches the callback within milliseconds (no
polling). The driver answers NVML_ERROR_GPU_IS_LOST from the wait on a set that holds a lost GPU
(and a set cannot drop a device), so a lost GPU's set is freed and its thread ends; the main
thread registers the GPU again on a slow cadence (``rebuild_seconds``), and the other GPUs keep
their sets, threads and queued events throughout.

Why one set per GPU (measured on the simulated driver, 50 trials each: XID 79 on GPU 1, then an
XID on GPU 0 0 or 10 ms later): one shared set, freed and rebuilt on GPU_IS_LOST, lost GPU 0's XID
50 of 50 times (freeing drops what is queued; the rebuild gap swallows what comes after). Draining
the shared set before rebuilding lost none at 0 ms in the run that finished, but still leaves a
window between freeing the old set and registering the new one, and it cannot drain at all under a
driver that answers GPU_IS_LOST on every wait of that set. One set per GPU lost 0 of 50 at both
offsets by construction: no healthy GPU's set is ever freed. The cost is one thread per GPU, each
blocked in the driver (8 on a DGX), each waking once per ``wait_ms`` (1 s: an event still comes
at once; the timeout only bounds how long a stop waits, and how often nine threads wake up).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from runtimekit.gpu.nvml import NvmlInitError, NvmlSession, error_name
from runtimekit.gpu.types import XidEvent

log = logging.getLogger(__name__)

NO_ID = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class _Waiter:
    """One GPU's waiting thread, the flag that ends it, and the GPU (index, uuid) it watches."""

    thread: threading.Thread
    done: threading.Event
    gpu: tuple[int, str]


class XidWatcher:
    """Owns the event thread. ``start()`` and ``stop()`` are called from the service."""

    def __init__(
        self,
        session: NvmlSession,
        on_xid: Callable[[XidEvent], None],
        *,
        wait_ms: int = 1000,
        rebuild_seconds: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.session = session
        self.on_xid = on_xid
        self.wait_ms = wait_ms
        self.rebuild_seconds = rebuild_seconds
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._crashed: BaseException | None = None
        self.heartbeat_at = time.monotonic()  # the thread's last sign of life (monotonic seconds)
        self._waiters: dict[int, _Waiter] = {}  # GPU index -> its waiting thread (main thread only)
        self._beats: dict[int, float] = {}  # GPU index -> its thread's last sign of life (monotonic s)
        self._unsupported: set[int] = set()  # GPUs without XID events at the last build
        self._built_count = 0  # nvmlDeviceGetCount at the last build
        self._built_at: float | None = None  # monotonic seconds of the last build (None: not yet)
        self._left_out: set[int] = set()  # GPUs whose registration failed at the last try (logged once)

    @property
    def registered(self) -> dict[int, tuple[int, str]]:
        """GPU index -> (index, uuid) of every GPU whose XID events are watched now."""
        return {index: waiter.gpu for index, waiter in self._waiters.copy().items()}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="runtimekit-xid-events", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raise when the thread is dead (with its exception) or has not shown life for longer
        than it ever waits (stuck in the driver): the supervisor then restarts the watcher."""
        if self._crashed is not None:
            raise RuntimeError(f"XID event thread died: {type(self._crashed).__name__}: {self._crashed}") from self._crashed
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            raise RuntimeError("XID event thread ended")
        now = time.monotonic()
        silent = now - min([self.heartbeat_at, *self._beats.copy().values()])
        if silent > self.liveness_seconds:
            raise RuntimeError(f"XID event thread silent for {silent:.1f} s (stuck in the driver?)")

    @property
    def liveness_seconds(self) -> float:
        """How long a thread may go without a heartbeat: the longer of a wait in the driver and the
        rebuild cadence (between two looks at lost GPUs), with margin."""
        return max(self.rebuild_seconds, self.wait_ms / 1000) + 10.0

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # noqa: BLE001 - reported through check(), to the supervisor
            self._crashed = error

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.heartbeat_at = time.monotonic()
                self._reap()
                if self._should_rebuild():
                    try:
                        self.session.init()
                    except NvmlInitError:
                        self._built_at = time.monotonic()  # the sampler reports why; retried on the cadence
                    else:
                        self._build_set()
                self._stop.wait(self.wait_ms / 1000)
        finally:
            for waiter in self._waiters.values():
                waiter.done.set()
            for waiter in self._waiters.values():
                waiter.thread.join(self.wait_ms / 1000 + 1.0)

    def _reap(self) -> None:
        """Forget the waiters that ended (their GPU was lost, or their wait failed): they are
        registered again on the rebuild cadence."""
        ended = [index for index, waiter in self._waiters.items() if not waiter.thread.is_alive()]
        for index in ended:
            del self._waiters[index]

    def _should_rebuild(self) -> bool:
        """Build at start; then, on a slow cadence, while a GPU is unwatched because of an error (lost:
        it may be back) or when the device count changed. A GPU that merely lacks XID events never
        forces one."""
        if self._built_at is None:
            return True
        if time.monotonic() - self._built_at < self.rebuild_seconds:
            return False
        if any(i not in self._waiters and i not in self._unsupported for i in range(self._built_count)):
            return True
        try:
            return pynvml.nvmlDeviceGetCount() != self._built_count
        except pynvml.NVMLError:
            return True

    def _build_set(self) -> None:
        """One event set and one waiting thread for each XID-capable GPU not watched yet; the GPUs
        already watched keep their sets (and what is queued in them)."""
        self._built_at = time.monotonic()
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            log.warning("XID events unavailable: %s", error_name(error))
            return
        self._built_count = count
        self._unsupported = set()
        self._left_out &= set(range(count))
        for index in range(count):
            if index in self._waiters:
                continue
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                if not pynvml.nvmlDeviceGetSupportedEventTypes(handle) & pynvml.nvmlEventTypeXidCriticalError:
                    self._unsupported.add(index)
                    self._left_out.discard(index)
                    continue
                event_set = pynvml.nvmlEventSetCreate()
            except pynvml.NVMLError as error:
                self._leave_out(index, error)
                continue  # lost or erring: tried again at the next rebuild
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except pynvml.NVMLError as error:
                self._leave_out(index, error)
                self._free(event_set)
                continue
            self._back_in(index)
            gpu = (index, uuid.decode() if isinstance(uuid, bytes) else uuid)
            done = threading.Event()
            waiter = _Waiter(threading.Thread(target=self._wait_gpu, args=(gpu, event_set, done),
                                              name=f"runtimekit-xid-events-{index}", daemon=True), done, gpu)
            self._waiters[index] = waiter
            waiter.thread.start()

    def _leave_out(self, index: int, error: pynvml.NVMLError) -> None:
        """Note that GPU ``index`` could not be registered (NVML ``error``); logged when it is left
        out, not again on each retry at the rebuild cadence (docs/health.md: transitions are logged
        once)."""
        if index not in self._left_out:
            self._left_out.add(index)
            log.info("GPU %d left out of XID events: %s", index, error_name(error))

    def _back_in(self, index: int) -> None:
        """Note that GPU ``index`` was registered; logged once if it had been left out."""
        if index in self._left_out:
            self._left_out.discard(index)
            log.info("GPU %d back in XID events", index)

    def _wait_gpu(self, gpu: tuple[int, str], event_set: Any, done: threading.Event) -> None:
        """One GPU's thread: wait on its own set until stopped or until the wait fails (GPU lost)."""
        index = gpu[0]
        try:
            while not self._stop.is_set() and not done.is_set():
                self._beats[index] = time.monotonic()
                try:
                    data = pynvml.nvmlEventSetWait(event_set, self.wait_ms)
                except pynvml.NVMLError as error:
                    if error.value == pynvml.NVML_ERROR_TIMEOUT:
                        continue
                    log.warning("GPU %d: nvmlEventSetWait answered %s; its XID events are watched again "
                                "at the next rebuild", index, error_name(error))
                    return
                self._deliver(gpu, data)
        except BaseException as error:  # noqa: BLE001 - reported through check(), to the supervisor
            self._crashed = error
        finally:
            self._beats.pop(index, None)
            self._free(event_set)

    def _deliver(self, gpu: tuple[int, str], data: Any) -> None:
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return
        index, uuid = gpu
        event = XidEvent(
            gpu_index=index,
            uuid=uuid,
            xid=int(data.eventData),
            received_at=self.clock(),
            gpu_instance_id=None if data.gpuInstanceId == NO_ID else int(data.gpuInstanceId),
            compute_instance_id=None if data.computeInstanceId == NO_ID else int(data.computeInstanceId),
        )
        log.warning("XID %d on GPU %d (%s)", event.xid, index, uuid)
        self.on_xid(event)

    def _free(self, event_set: Any) -> None:
        try:
            pynvml.nvmlEventSetFree(event_set)
        except pynvml.NVMLError:
            pass
