"""The gang placement service, composed: the decision loop (controller.py) and, when
``webhook.listen`` is set, the admission webhook (webhook.py), until cancelled.

The webhook is served by the project's listener (``runtimekit.listener``) under the ``listener``
section, as the agent and the remediation service are: the deadlines by phase and the connection
cap of ``ListenerConfig``, and TLS, client certificates and basic auth from the web configuration
file ``listener.web_config_file``, re-read when it or a certificate, key or CA file it names
changes (a renewed certificate serves the next connection, without a restart). ``/healthz`` asks
no credentials. ``serve_webhook`` is the listener's context manager (``listening``) rather than
``serve_app``, which waits for signals itself: here the command line owns the signals and cancels
``run``, which stops the webhook with the controller.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

from runtimekit.listener import Listener, listening
from runtimekit.schema import parse_listen

from .config import GangConfig, check_webhook_web_config
from .controller import GangController
from .kubeapi import ClusterApi
from .placer import Placer
from .webhook import make_app

__all__ = ["GangService", "serve_webhook"]

log = logging.getLogger(__name__)


def serve_webhook(config: GangConfig) -> AbstractAsyncContextManager[Listener]:
    """The admission webhook served on ``webhook.listen`` under the ``listener`` section while the
    context lasts (its ``address``: ``https://HOST:PORT``, the port bound when 0 was asked); OSError
    when the address cannot be bound; ValueError when ``webhook.listen`` is null (no webhook)."""
    if config.webhook.listen is None:
        raise ValueError("webhook.listen: null, so there is no webhook to serve")
    host, port = parse_listen(config.webhook.listen)
    return listening(make_app(config.namespaces), host, port, config.listener)


class GangService:
    """The controller and the webhook of one cluster. Building it checks the webhook's web
    configuration file (``ConfigError`` naming ``listener.web_config_file`` when it cannot serve HTTPS)."""

    def __init__(self, config: GangConfig, api_client: Any) -> None:
        check_webhook_web_config(config)
        self.config = config
        self.api = ClusterApi(api_client)
        self.placer = Placer(config.tiers.tiers())
        self.controller = GangController(self.api, self.placer, config)
        self.webhook_address: str | None = None  # "https://HOST:PORT" once serving

    async def run(self) -> None:
        """Serve until cancelled; OSError when the webhook's address cannot be bound."""
        async with AsyncExitStack() as stack:
            if self.config.webhook.listen is not None:
                listener = await stack.enter_async_context(serve_webhook(self.config))
                self.webhook_address = listener.address
                log.info("admission webhook listening on %s (%s)", listener.address, listener.security)
            await self.controller.run()
