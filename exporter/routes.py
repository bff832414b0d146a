"""``GET /metrics``: content negotiation (Prometheus text 0.0.4 or OpenMetrics 1.0.0, gzip) over
the exposition cache. The handler only awaits the cache; it never touches NVML."""

from __future__ import annotations

from aiohttp import web

from runtimekit.exporter.exposition import CONTENT_TYPES, ExpositionCache, Format

# OpenMetrics versions whose text we produce (0.0.1 is what Prometheus < 2.4x called 1.0.0).
_OPENMETRICS_VERSIONS = {"1.0.0", "0.0.1"}


def _media_ranges(header: str) -> list[tuple[str, dict[str, str]]]:
    ranges = []
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        params = {}
        for param in fields[1:]:
            name, _, value = param.partition("=")
            params[name.strip().lower()] = value.strip().strip('"')
        ranges.append((fields[0].lower(), params))
    return ranges


def _quality(params: dict[str, str]) -> float:
    try:
        return float(params.get("q", "1"))
    except ValueError:
        return 0.0


def negotiate_format(accept: str) -> Format:
    """OpenMetrics 1.0.0 when Accept asks for application/openmetrics-text (q > 0) of a version we speak."""
    for media_type, params in _media_ranges(accept):
        if media_type != "application/openmetrics-text" or _quality(params) <= 0:
            continue
        if params.get("version", "1.0.0") in _OPENMETRICS_VERSIONS:
            return "openmetrics"
    return "text"


def accepts_gzip(accept_encoding: str) -> bool:
    return any(coding == "gzip" and _quality(params) > 0 for coding, params in _media_ranges(accept_encoding))


def add_exporter_routes(app: web.Application, cache: ExpositionCache) -> None:
    """Add ``GET /metrics`` (and HEAD) serving ``cache``'s exposition."""

    async def metrics(request: web.Request) -> web.Response:
        fmt = negotiate_format(request.headers.get("Accept", ""))
        use_gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
        body = await cache.render(fmt, gzip=use_gzip)
        headers = {"Content-Type": CONTENT_TYPES[fmt], "Vary": "Accept, Accept-Encoding"}
        if use_gzip:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    app.router.add_get("/metrics", metrics)
