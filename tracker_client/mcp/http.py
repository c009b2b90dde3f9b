"""``backlog-worker mcp --http``: the MCP server over streamable HTTP, behind a bearer token.

The SDK's streamable HTTP app (``/mcp``) is wrapped in :class:`BearerGate`: every HTTP request
must carry ``Authorization: Bearer <token>``, compared in constant time; anything else is a
``401`` with a ``WWW-Authenticate`` challenge and a JSON error naming what is missing (never
the token). There is no way to serve it without a token, on loopback or not (the CLI refuses:
docs/submit/mcp.md#streamable-http). On a loopback address the SDK's own Host and Origin checks
(DNS rebinding) stay on as well.

It may touch the listening socket it is given and the SDK's app; it imports the SDK and uvicorn.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from typing import Any

from mcp.server.mcpserver import MCPServer

from tracker_client.errors import ConfigError

__all__ = ["PATH", "BearerGate", "bind", "is_loopback", "serve_http", "url_of"]

#: Where the MCP endpoint is served.
PATH = "/mcp"

_Scope = dict[str, Any]
_Receive = Any
_Send = Any


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerGate:
    """An ASGI app letting through only HTTP requests bearing ``token`` (lifespan passes)."""

    def __init__(self, app: Any, token: str) -> None:
        if not token:
            raise ConfigError("the MCP server's HTTP token is empty")
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        """Refuse an HTTP request without the token; pass everything else to the app."""
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers", ()):
                if name == b"authorization":
                    given = value
                    break
            scheme, _, presented = given.strip().partition(b" ")
            if scheme.lower() != b"bearer" or not presented:
                await _refuse(send, "missing bearer token")
                return
            if not hmac.compare_digest(presented.strip(), self._expected):
                await _refuse(send, "wrong bearer token")
                return
        await self.app(scope, receive, send)


async def _refuse(send: _Send, why: str) -> None:
    body = json.dumps(
        {"error": {"code": "unauthorized", "message": f"{why}: send Authorization: Bearer"}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="backlog-worker mcp"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: any free one); ``ConfigError``
    naming the address when it cannot be bound. Made with ``IPPROTO_TCP`` named: asyncio turns
    Nagle's algorithm off (``TCP_NODELAY``) only on connections of such a socket, and with it on
    every answer on a kept-alive connection waited ~40 ms for the client's delayed ACK."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = exc.strerror or exc
        raise ConfigError(f"--http {host}:{port}: cannot listen there: {why}") from exc
    sock.set_inheritable(True)
    return sock


async def serve_http(server: MCPServer[Any], sock: socket.socket, token: str) -> None:
    """Serve ``server`` on ``sock`` at :data:`PATH` until cancelled (or SIGINT/SIGTERM)."""
    import uvicorn

    host = sock.getsockname()[0]
    app = BearerGate(server.streamable_http_app(streamable_http_path=PATH, host=host), token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])


def url_of(sock: socket.socket) -> str:
    """The endpoint's URL on ``sock`` (its real port, for ``--http 127.0.0.1:0``)."""
    address, port = sock.getsockname()[:2]
    shown = f"[{address}]" if ":" in address else address
    return f"http://{shown}:{port}{PATH}"
