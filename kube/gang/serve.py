"""The gang placement service, composed: the decision loop (controller.py) and, when
``webhook.listen`` is set, the admission webhook (webhook.py) over HTTPS, until cancelled.

The webhook is served by aiohttp's own TCP site with the TLS context (the project's listener policy,
runtimekit.listener, serves plain HTTP only); its only client is the API server. Its certificate
files are checked for a change every ``CERT_CHECK_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from runtimekit.schema import parse_listen

from .config import GangConfig
from .controller import GangController
from .kubeapi import ClusterApi
from .placer import Placer
from .webhook import TlsFiles, make_app

__all__ = ["CERT_CHECK_SECONDS", "GangService"]

log = logging.getLogger(__name__)

CERT_CHECK_SECONDS = 60.0


class GangService:
    """The controller and the webhook of one cluster. Building it loads the webhook's certificate
    (OSError or ssl.SSLError when it cannot: the command line names the key)."""

    def __init__(self, config: GangConfig, api_client: Any) -> None:
        self.config = config
        self.api = ClusterApi(api_client)
        self.placer = Placer(config.tiers.tiers())
        self.controller = GangController(self.api, self.placer, config)
        webhook = config.webhook
        self.tls = TlsFiles(webhook.cert_file, webhook.key_file) if webhook.listen and webhook.cert_file and webhook.key_file else None
        self.webhook_address: str | None = None  # "https://HOST:PORT" once serving

    async def run(self) -> None:
        """Serve until cancelled; OSError when the webhook's address cannot be bound."""
        runner: web.AppRunner | None = None
        tasks = [asyncio.create_task(self.controller.run(), name="gang-controller")]
        try:
            if self.tls is not None and self.config.webhook.listen:
                host, port = parse_listen(self.config.webhook.listen)
                runner = web.AppRunner(make_app(self.config.namespaces), handle_signals=False, shutdown_timeout=1.0)
                await runner.setup()
                await web.TCPSite(runner, host, port, ssl_context=self.tls.context).start()
                bound = runner.addresses[0]
                self.webhook_address = f"https://{bound[0]}:{bound[1]}"
                log.info("admission webhook listening on %s", self.webhook_address)
                tasks.append(asyncio.create_task(self._watch_certificate(self.tls), name="gang-webhook-certificate"))
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if runner is not None:
                await runner.cleanup()

    async def _watch_certificate(self, tls: TlsFiles) -> None:
        while True:
            await asyncio.sleep(CERT_CHECK_SECONDS)
            tls.reload_if_changed()
