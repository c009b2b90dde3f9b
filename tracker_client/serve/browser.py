"""What a browser may ask of a server the project starts: the Host, Origin and Content-Type rules.

A server on 127.0.0.1 is reachable by every web page the operator opens. Two attacks follow
(docs/operate/security.md):

* **cross-site writes**: a page posts a form (``text/plain``, no preflight) to
  ``http://127.0.0.1:7700/ops/cancel-all``. Refused here because a JSON route takes only
  ``application/json`` (a browser cannot send that cross-site without a CORS preflight, which the
  server never grants), and because a browser's write carrying an ``Origin`` other than the
  server's own (or ``Sec-Fetch-Site: cross-site``/``same-site``) is refused whatever its type;
* **DNS rebinding**: a page at ``evil.example`` re-points its own name to 127.0.0.1, and its
  requests, now same-origin to the browser, carry ``Host: evil.example``. Refused here because
  the ``Host`` must be one the server knows as its own: loopback names, the bound address, this
  machine's name, any IP literal (rebinding needs a DNS name), and the names the operator adds
  (``--allowed-host``, ``BACKLOG_WORKER_ALLOWED_HOSTS``; ``*`` turns the check off).

Plain clients (curl, the NullTickets client, scripts) send no ``Origin`` and no
``Sec-Fetch-*`` and are not affected, provided they label a JSON body as JSON.

It reads the ASGI scope's headers it is given and the machine's host name, and
:class:`BrowserGuard` answers a refusal itself; no tracker.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "ALLOWED_HOSTS_ENV",
    "BrowserGuard",
    "HostRule",
    "Refusal",
    "cross_site_write",
    "header",
    "host_refusal",
    "json_type_refusal",
    "named_hosts",
    "write_refusal",
]

#: The environment variable that adds names to :class:`HostRule` (comma-separated).
ALLOWED_HOSTS_ENV = "BACKLOG_WORKER_ALLOWED_HOSTS"

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - names a bind, binds nothing
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: its HTTP status, an error code and the words to show."""

    status: int
    code: str
    message: str


def _hostname(value: str) -> str:
    """The host part of a ``Host`` header or an origin's netloc, lowercased, no port, no dot
    at the end, no IPv6 brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostRule:
    """The ``Host`` names a server answers: ``names`` (lowercase), any IP literal, or anything
    when ``any_host`` (the operator's ``*``)."""

    names: frozenset[str]
    any_host: bool = False

    @classmethod
    def for_bind(cls, bind_host: str, extra: Iterable[str] = ()) -> HostRule:
        """The default rule of a server bound to ``bind_host``: loopback names, the bound name,
        this machine's name when bound beyond loopback, plus ``extra``
        (``*`` allows any host)."""
        added = [item.strip().lower() for item in extra if item.strip()]
        names = set(_LOOPBACK_NAMES)
        bound = _hostname(bind_host)
        if bound not in _WILDCARDS:
            names.add(bound)
        if not _is_loopback(bound):
            names.update(_machine_names())
        names.update(_hostname(item) for item in added if item != "*")
        return cls(frozenset(names), any_host="*" in added)

    def allows(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header (None: no header, an HTTP/1.0 client
        and never a browser) is for this server."""
        if host is None or self.any_host:
            return True
        name = _hostname(host)
        return name in self.names or _is_ip(name) or name.endswith(".localhost")


def named_hosts(flags: Iterable[str], environ: dict[str, str] | None = None) -> list[str]:
    """The extra ``Host`` names of ``--allowed-host`` (each may list several, comma-separated)
    and of :data:`ALLOWED_HOSTS_ENV` in ``environ`` (default: the process's)."""
    import os

    env = (os.environ if environ is None else environ).get(ALLOWED_HOSTS_ENV, "")
    return [name.strip() for item in (*flags, env) for name in item.split(",") if name.strip()]


def _is_loopback(name: str) -> bool:
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _machine_names() -> set[str]:
    """This machine's name (no resolver lookup: a slow DNS must not delay a start)."""
    name = socket.gethostname().lower().rstrip(".")
    return {name} if name else set()


def header(scope: Mapping[str, Any], name: bytes) -> str | None:
    """The first value of header ``name`` (lowercase bytes) in an ASGI scope, or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def host_refusal(scope: Mapping[str, Any], rule: HostRule) -> Refusal | None:
    """The 421 refusal of a request whose ``Host`` is not one of ``rule``'s (a DNS-rebinding
    page's), else None."""
    host = header(scope, b"host")
    if rule.allows(host):
        return None
    return Refusal(
        421,
        "host_not_allowed",
        f"Host {_hostname(host or '')!r} is not a name of this server (a DNS-rebinding page?);"
        f" start it with --allowed-host NAME or {ALLOWED_HOSTS_ENV} to allow it",
    )


def cross_site_write(scope: Mapping[str, Any]) -> bool:
    """True when a browser sent this write (any method but GET/HEAD/OPTIONS) from another
    origin. ``Sec-Fetch-Site`` decides when the browser sent it (a page cannot forge it):
    anything but ``same-origin``/``none`` is cross-site. Without it (an older browser, or a
    non-loopback ``http://`` address, where browsers leave it out), an ``Origin`` that is not
    ``scheme://Host`` of the request itself, ``Origin: null`` included, is cross-site."""
    if str(scope.get("method", "GET")) in _SAFE_METHODS:
        return False
    site = header(scope, b"sec-fetch-site")
    if site is not None:
        return site.strip().lower() not in ("same-origin", "none")
    origin = header(scope, b"origin")
    if origin is None:
        return False
    parts = urlsplit(origin.strip().lower())
    host = (header(scope, b"host") or "").strip().lower()
    return not parts.netloc or parts.netloc != host


def write_refusal(scope: Mapping[str, Any]) -> Refusal | None:
    """The 403 refusal of a browser's cross-origin write (:func:`cross_site_write`), else None."""
    if not cross_site_write(scope):
        return None
    return Refusal(
        403,
        "cross_origin",
        "a browser's write from another origin is refused (Origin / Sec-Fetch-Site);"
        " plain clients send neither header",
    )


def json_type_refusal(scope: Mapping[str, Any]) -> Refusal | None:
    """The 415 refusal of a body not labelled ``application/json`` on a JSON route, else None.

    A request with no body and no ``Content-Type`` passes (``curl -X POST``); any other must
    say ``application/json`` (parameters such as ``charset`` allowed), which no cross-site
    form or no-preflight ``fetch`` can.
    """
    kind = header(scope, b"content-type")
    if kind is None:
        length = header(scope, b"content-length")
        chunked = header(scope, b"transfer-encoding") is not None
        if not chunked and (length is None or length.strip() in ("", "0")):
            return None
    elif kind.split(";", 1)[0].strip().lower() == "application/json":
        return None
    return Refusal(
        415,
        "unsupported_media_type",
        f"the body must be sent as Content-Type: application/json (got {kind or 'none'!s})",
    )


class BrowserGuard:
    """An ASGI app behind :func:`host_refusal` and :func:`write_refusal` (the dashboard served
    on its own; ``tracker serve`` applies the same rules in its own dispatch). A refusal is a
    JSON ``{"error":{"code","message"}}`` answer."""

    def __init__(self, app: Any, hosts: HostRule) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer the refusal, or pass the request on."""
        if scope["type"] == "http":
            refusal = host_refusal(scope, self.hosts) or write_refusal(scope)
            if refusal is not None:
                body = json.dumps(
                    {"error": {"code": refusal.code, "message": refusal.message}}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": refusal.status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
