"""The agent's loop handler of uncaught callback errors: grpcio's poller reading its descriptor
after grpc closed it while the agent stops (OSError EBADF in ``PollerCompletionQueue._handle_events``,
seen in the SIGTERM-while-stuck test's log) is not logged as an error; any other error still is."""

from __future__ import annotations

import errno

from runtimekit.service import _grpc_teardown_race_is_quiet


class _Loop:
    """Records what reaches the loop's default handler."""

    def __init__(self) -> None:
        self.defaulted: list[dict[str, object]] = []

    def default_exception_handler(self, context: dict[str, object]) -> None:
        self.defaulted.append(context)


def _raised_in(filename: str, function: str, error: OSError) -> OSError:
    """``error`` raised from a function ``function`` defined in a file named ``filename``."""
    namespace: dict[str, object] = {"error": error}
    exec(compile(f"def {function}():\n    raise error\n", filename, "exec"), namespace)  # noqa: S102
    try:
        namespace[function]()  # type: ignore[operator]
    except OSError as raised:
        return raised
    raise AssertionError("not raised")


def test_grpc_poller_reading_its_closed_descriptor_is_quiet() -> None:
    loop = _Loop()
    error = _raised_in("src/python/grpcio/grpc/_cython/_cygrpc/aio/completion_queue.pyx.pxi", "_handle_events",
                       OSError(errno.EBADF, "Bad file descriptor"))
    _grpc_teardown_race_is_quiet(loop, {"message": "Exception in callback None()", "exception": error})  # type: ignore[arg-type]
    assert loop.defaulted == []


def test_other_errors_reach_the_default_handler() -> None:
    loop = _Loop()
    ours = _raised_in("runtimekit/sampler.py", "_handle_events", OSError(errno.EBADF, "Bad file descriptor"))
    other_errno = _raised_in("completion_queue.pyx.pxi", "_handle_events", OSError(errno.EIO, "I/O error"))
    for context in ({"message": "m", "exception": ours}, {"message": "m", "exception": other_errno},
                    {"message": "no exception at all"}):
        _grpc_teardown_race_is_quiet(loop, context)  # type: ignore[arg-type]
    assert len(loop.defaulted) == 3
