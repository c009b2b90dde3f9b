"""The connections of the NullTickets client: which ``httpx.AsyncClient`` a request is sent on.

:class:`~tracker_client.nulltickets.transport.HttpTransport` sends every request on a client
built here once (one for ``Connection: close`` requests, one for persistent connections once the
server advertises ``keep_alive``). What is decided here, and only at build time: TLS (a context
for ``https://``, built once per process; none at all for ``http://``, where an SSL context
would cost ~6-7 MiB of RSS for nothing: httpx's own transport without an SSL context carries
``http://``) and the pool's limits. It stands apart from the transport because none of it is
looked at per request.

``http://`` goes through httpx's own transport (httpcore's pool). A hand-written HTTP/1.1
transport did it for a while, in 1.35-1.4x less worker CPU per task, but was worth only
1.18-1.20x tasks/s to a worker draining a served rail (``python -m bench.transport``, see
docs/benchmarks.md): under the 1.3x that would pay for keeping an HTTP client of our own.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx

__all__ = [
    "KEEP_ALIVE_CONNECTIONS",
    "KEEP_ALIVE_EXPIRY_S",
    "PlainHttpTransport",
    "http_client",
    "tls_context",
]

#: Idle persistent connections are dropped after this (the served tracker closes them at 5 s:
#: the client lets go first, so a request is seldom sent on a connection the server is closing).
KEEP_ALIVE_EXPIRY_S = 2.0
#: Persistent connections kept idle at most (a worker's slots share them).
KEEP_ALIVE_CONNECTIONS = 32


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, built once per process (building one costs ~50-200 ms,
    which every tracker instance and every short-lived CLI call would otherwise pay). Only an
    ``https://`` tracker builds it: see :class:`PlainHttpTransport`."""
    return httpx.create_ssl_context()


class PlainHttpTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport for an ``http://`` tracker, built without an SSL context.

    ``httpx.AsyncHTTPTransport`` makes an ``ssl.SSLContext`` even for plain HTTP (with
    ``verify=False`` too), and OpenSSL's context costs ~6-7 MiB of RSS (certifi's bundle on top):
    a worker on a plain-http rail paid it for nothing. httpcore's pool builds its (verifying)
    default context only when it opens a TLS connection, so it is handed none. Everything else
    (request/response mapping, httpcore errors mapped to httpx's) is the parent's, which reaches
    the pool as ``self._pool``: the test that counts SSL contexts catches a release that moves it.
    """

    def __init__(self, limits: httpx.Limits) -> None:
        import httpcore

        # The parent's __init__ is the part that builds the context: its pool is built here.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=None,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
        )


def http_client(
    url: str, transport: httpx.AsyncBaseTransport | None, limits: httpx.Limits, **kw: Any
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for ``url``: TLS verified with :func:`tls_context` for
    ``https://``; no SSL context at all for ``http://`` (:class:`PlainHttpTransport`). An
    injected transport is used as it is. Answers are read as a stream and a too-large one is
    refused as it arrives, by :class:`~tracker_client.nulltickets.transport.HttpTransport`."""
    if transport is None and not url.lower().startswith("https:"):
        transport = PlainHttpTransport(limits)
    verify: ssl.SSLContext | bool = tls_context() if transport is None else True
    return httpx.AsyncClient(
        base_url=url,
        limits=limits,
        transport=transport,
        verify=verify,
        follow_redirects=False,
        trust_env=False,
        **kw,
    )
