"""TLS, client certificates and basic auth for every listener, from one file in the Prometheus
exporter-toolkit's web configuration format (docs/security.md; the format:
https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md).

- ``model``: the file, read strictly (an unknown key or a value we cannot honour is an error naming it);
- ``tls``: its ``tls_server_config`` as an ``ssl.SSLContext``, and the client SAN check;
- ``basic``: bcrypt checks of basic credentials, off the event loop, remembered;
- ``source``: the file kept current (re-read when it or a file it names changes; fails closed);
- ``guard``: what an aiohttp listener applies (TLS per connection, a middleware per request);
- ``grpc_port``: the same for a gRPC TCP port (dynamic TLS credentials, an interceptor).

``runtimekit.listener`` applies it to the agent's and the remediation service's HTTP listeners
(``listener.web_config_file``), ``runtimekit.api.server`` to the gRPC TCP port.
"""

from .guard import GUARD, OPEN_PATHS, ConnectionRefused, Guard
from .model import WebConfig, WebConfigError, read_web_config
from .source import Loaded, WebConfigSource, load_web_config

__all__ = [
    "GUARD",
    "OPEN_PATHS",
    "ConnectionRefused",
    "Guard",
    "Loaded",
    "WebConfig",
    "WebConfigError",
    "WebConfigSource",
    "load_web_config",
    "read_web_config",
]
