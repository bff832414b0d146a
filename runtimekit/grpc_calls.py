"""The tasks serving a ``grpc.aio`` server's calls, so that a stop can wait for them.

``grpc.aio.Server.stop`` can return while the task serving a call it cancelled is still pending.
A process that then leaves ``asyncio.run`` has that task cancelled by asyncio, and grpc logs
"Exception not handled by _handle_exceptions" at ERROR with a traceback, on an ordinary SIGTERM
with a call in flight (a device plugin's ListAndWatch, a DRA driver's prepare past its grace).
``CallTasks`` is a server interceptor that records the task serving each call;
``UnixGrpcServer.stop`` waits for them after the server's own stop (``done``), cancelling those
still running after a while.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

WAIT_SECONDS = 1.0  # after a stop, how long its calls' tasks may take to end (then cancelled, as long again)
CALL_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")  # grpc.RpcMethodHandler's behaviours


class CallTasks(grpc.aio.ServerInterceptor):
    """A server interceptor that records the task serving each call until it ends."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        # grpc's handlers are named tuples: (de)serializers, flags and one behaviour per call kind.
        wrapped = {kind: self._wrap(behaviour) for kind in CALL_KINDS if (behaviour := getattr(handler, kind)) is not None}
        return handler._replace(**wrapped)

    def _track(self) -> None:
        task = asyncio.current_task()
        if task is not None and task not in self._tasks:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _wrap(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        track = self._track
        if asyncio.iscoroutinefunction(behaviour):
            async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
                track()
                return await behaviour(request, context)
            return answer

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            track()
            async for response in behaviour(request, context):
                yield response
        return stream

    async def done(self, timeout: float = WAIT_SECONDS) -> None:
        """Wait until every recorded task is done: at most ``timeout`` seconds, then those left are
        cancelled (grpc ends a cancelled call's task quietly) and waited for as long again."""
        if not self._tasks:
            return
        _, left = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=timeout)
