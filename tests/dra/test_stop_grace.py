"""A driver told to stop lets a NodePrepareResources call in flight on dra.sock finish (as the
DaemonSet's terminationGracePeriodSeconds promises), within ``agent_timeout_seconds``, instead of
cancelling it under the kubelet; it takes no new call meanwhile.

``DraService`` in this process, the fake kubelet (kubelet_fake.py) on real unix sockets, and a
claim reader that holds the prepare's ResourceClaim read until the test lets it go (no agent runs:
the claim is not found, so the prepare's answer is that claim's error, an answer all the same).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from runtimekit.kube.dra.claims import ClaimRef
from tests.dra.dra_claims import ClaimStore
from tests.dra.dra_rig import NodeAgent, driver_config, running_driver, short_directory


@dataclass
class HeldStore(ClaimStore):
    """A ClaimStore whose reads wait for ``release``; ``reading`` is set once one waits."""

    reading: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reading.set()
        await self.release.wait()
        return await super().read(namespace, name)


async def test_a_prepare_in_flight_finishes_when_the_driver_stops() -> None:
    with short_directory() as directory:
        config = driver_config(directory, NodeAgent(directory, "dgx-h100"), cleanup_interval_seconds=3600)
        store = HeldStore()
        async with running_driver(config, store) as driver:
            ref = ClaimRef("default", "uid-held", "held")
            prepare = asyncio.create_task(driver.kubelet.prepare([ref]))
            await asyncio.wait_for(store.reading.wait(), 10)
            driver.task.cancel()  # SIGTERM: the service stops
            await asyncio.sleep(0.3)  # dra.sock is stopping meanwhile
            assert not prepare.done()
            store.release.set()
            answers = await asyncio.wait_for(prepare, config.agent_timeout_seconds)
            assert "no ResourceClaim default/held" in answers["uid-held"].error
