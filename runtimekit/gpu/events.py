"""XID events: a dedicated thread blocked in nvmlEventSetWait, as the driver delivers them.

The thread registers NVML's XidCriticalError event on every GPU that supports it and hands each
event to a callback within milliseconds (no polling). The real driver answers
NVML_ERROR_GPU_IS_LOST from the wait when any GPU in the set is lost; the watcher then rebuilds
the set without that GPU, so the other GPUs' XIDs keep flowing, and retries the lost one on a
slow cadence.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pynvml

from runtimekit.gpu.nvml import NvmlInitError, NvmlSession, error_name
from runtimekit.gpu.types import XidEvent

log = logging.getLogger(__name__)

NO_ID = 0xFFFFFFFF


def _address(handle: Any) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


class XidWatcher:
    """Owns the event thread. ``start()`` and ``stop()`` are called from the service."""

    def __init__(
        self,
        session: NvmlSession,
        on_xid: Callable[[XidEvent], None],
        *,
        wait_ms: int = 250,
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
        self.registered: dict[int | None, tuple[int, str]] = {}  # handle address (None: NULL) -> (gpu index, uuid)
        self._built_count = 0  # nvmlDeviceGetCount when the event set was built
        self._left_out = 0  # GPUs an error kept out of the event set at its last build

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
        silent = time.monotonic() - self.heartbeat_at
        if silent > self.liveness_seconds:
            raise RuntimeError(f"XID event thread silent for {silent:.1f} s (stuck in the driver?)")

    @property
    def liveness_seconds(self) -> float:
        """How long the thread may go without a heartbeat: its longest wait, with margin."""
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
        while not self._stop.is_set():
            self.heartbeat_at = time.monotonic()
            try:
                self.session.init()
            except NvmlInitError:
                self._stop.wait(self.rebuild_seconds)  # the sampler reports why
                continue
            event_set = self._build_set()
            if event_set is None:
                self._stop.wait(self.rebuild_seconds)
                continue
            try:
                self._wait_loop(event_set)
            finally:
                self._free(event_set)

    def _build_set(self) -> Any | None:
        self.registered = {}
        self._built_count = 0
        self._left_out = 0
        try:
            event_set = pynvml.nvmlEventSetCreate()
            count = pynvml.nvmlDeviceGetCount()
            self._built_count = count
        except pynvml.NVMLError as error:
            log.warning("XID events unavailable: %s", error_name(error))
            return None
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
                if not supported & pynvml.nvmlEventTypeXidCriticalError:
                    continue
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except pynvml.NVMLError as error:
                log.info("GPU %d left out of XID events: %s", index, error_name(error))
                self._left_out += 1  # lost or erring: tried again at the next rebuild
                continue
            self.registered[_address(handle)] = (index, uuid.decode() if isinstance(uuid, bytes) else uuid)
        return event_set

    def _wait_loop(self, event_set: Any) -> None:
        built_with = self._built_count  # the devices there were, XID-capable or not
        built_at = time.monotonic()
        while not self._stop.is_set():
            self.heartbeat_at = time.monotonic()
            try:
                data = pynvml.nvmlEventSetWait(event_set, self.wait_ms)
            except pynvml.NVMLError as error:
                if error.value == pynvml.NVML_ERROR_TIMEOUT:
                    if self._should_rebuild(built_with, built_at):
                        return
                    continue
                log.warning("nvmlEventSetWait answered %s; rebuilding the event set", error_name(error))
                self._stop.wait(0.05)
                return
            self._deliver(data)

    def _should_rebuild(self, built_with: int, built_at: float) -> bool:
        """Rebuild on a slow cadence while a GPU was left out by an error (lost: it may be back) or
        when the device count changed; a GPU that merely lacks XID events never forces one."""
        if time.monotonic() - built_at < self.rebuild_seconds:
            return False
        if self._left_out:
            return True
        try:
            return pynvml.nvmlDeviceGetCount() != built_with
        except pynvml.NVMLError:
            return True

    def _deliver(self, data: Any) -> None:
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return
        gpu = self.registered.get(_address(data.device))
        if gpu is None:
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
