"""A plain NullTickets server's ``/health``, for the served app: what the benches and tests use to
make ``tracker serve``'s app look like the real server to a client (no extension is used).

Imports nothing but the standard library.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["PlainHealth"]


class PlainHealth:
    """ASGI middleware: ``/health`` answered without ``extensions`` and ``limits``, as a plain
    NullTickets server answers it (so clients use none of the served tracker's extensions)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/health":
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        body: list[bytes] = []

        async def capture(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                body.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        doc = json.loads(b"".join(body))
        doc.pop("extensions", None)
        doc.pop("limits", None)
        out = json.dumps(doc).encode()
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(out)).encode()))
        await send({"type": "http.response.start", "status": start["status"], "headers": headers})
        await send({"type": "http.response.body", "body": out})
