"""The one rule for HTTP requests that change something (the simulator's control API, the
remediation webhook): they must be declared ``Content-Type: application/json``.

A web page open in a browser can send a form, a ``text/plain`` body or no body at all to any
address without a CORS preflight (Fetch standard, "CORS-safelisted request-header"), with the
credentials the browser holds for that host; a request declared JSON needs the preflight, which
these services never answer. So no page can post into them cross-site.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["JSON", "not_declared_json"]

JSON = "application/json"


def not_declared_json(request: web.Request) -> str | None:
    """Why ``request`` may not be taken (answer it 415), or None when it is declared JSON."""
    if request.content_type == JSON:
        return None
    given = request.headers.get("Content-Type", "(none)")[:100]
    return (f"Content-Type: got {given!r}; must be {JSON} (a web page cannot send that cross-site without a "
            "CORS preflight)")
