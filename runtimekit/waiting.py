"""Waiting with a time limit inside a loop that a shutdown cancels.

``asyncio.wait_for`` on Python 3.11 returns normally when the cancellation reaches it just as the
awaited thing completes (an event set, a value arrived): the caller's loop goes round again and
the one cancellation that a service's stop sends is lost, so the process never exits (seen as a
``gang serve`` that did not stop on SIGTERM; CPython issue gh-86296, fixed in 3.12, where
``wait_for`` is built on ``asyncio.timeout``). ``asyncio.timeout`` tells its own cancellation from
the caller's, so ``within`` and ``finished_within`` use it, and nothing here calls ``wait_for``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(seconds: float, awaitable: Awaitable[T], default: T) -> T:
    """``await awaitable`` for at most ``seconds``: its result, or ``default`` when the time ran out
    (the awaitable is cancelled then). A cancellation of the caller always propagates, and a
    ``TimeoutError`` the awaitable raises itself is not taken for the time running out."""
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await awaitable
    except TimeoutError:
        if not limit.expired():
            raise
        return default


async def finished_within(seconds: float, awaitable: Awaitable[object]) -> bool:
    """``await awaitable`` for at most ``seconds``: True when it ended in time, False when the time
    ran out (it is cancelled then). For one-shot steps of a stop, such as a cleanup with a deadline:
    the same guarantees as ``within``."""

    async def finished() -> bool:
        await awaitable
        return True

    return await within(seconds, finished(), False)
