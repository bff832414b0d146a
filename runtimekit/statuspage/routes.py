"""The status page's HTTP routes: ``GET /`` (the page), ``GET /ui/status.js`` and ``/ui/status.css``
(its script and style, package data of ``runtimekit.statuspage``: ``static/``) and
``GET /api/v1/node`` (the JSON it refreshes from, ``runtimekit.statuspage.node_json``).

The page is self-contained: no CDN, no font, no request leaves the agent (its
Content-Security-Policy allows only the agent's own origin). Before its script runs it already says
what the old landing page said (the node, "8 GPUs", links to every endpoint), so it reads without
JavaScript too. Every text the script draws is set as text, never parsed as HTML.
"""

from __future__ import annotations

import html
import time
from importlib.resources import files
from string import Template

from aiohttp import web

from runtimekit import __version__
from runtimekit.state import NodeState
from runtimekit.statuspage.node_json import NODE_PATH, render_node, summary

PAGE_PATH = "/"
SCRIPT_PATH = "/ui/status.js"
STYLE_PATH = "/ui/status.css"
#: Only the agent's own origin: scripts and styles from /ui/, data from /api/v1/node.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _static(name: str) -> str:
    return files("runtimekit.statuspage").joinpath("static", name).read_text(encoding="utf-8")


def add_status_routes(app: web.Application, state: NodeState, node: str) -> None:
    """Serve the status page and ``GET /api/v1/node`` from ``state``; ``node`` names the node on the
    page ("simulated node dgx-h100", "this node")."""
    page = Template(_static("index.html"))
    assets = {SCRIPT_PATH: (_static("status.js"), "text/javascript"), STYLE_PATH: (_static("status.css"), "text/css")}
    secure = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
              "Cache-Control": "no-cache"}

    async def status_page(request: web.Request) -> web.Response:
        body = page.substitute(version=html.escape(__version__), node=html.escape(node),
                               summary=html.escape(summary(state.view())))
        return web.Response(text=body, content_type="text/html", headers=secure)

    async def asset(request: web.Request) -> web.Response:
        text, content_type = assets[request.path]
        return web.Response(text=text, content_type=content_type, headers=secure)

    async def node_document(request: web.Request) -> web.Response:
        document = render_node(state.view(), node=node, version=__version__, now=time.time())
        return web.json_response(document, headers={"Cache-Control": "no-store"})

    app.router.add_get(PAGE_PATH, status_page)
    for path in assets:
        app.router.add_get(path, asset)
    app.router.add_get(NODE_PATH, node_document)
