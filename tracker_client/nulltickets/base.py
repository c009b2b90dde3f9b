"""Shared state of the NullTickets client: options, capability detection, request helpers.

:class:`tracker_client.nulltickets.client.RemoteTracker` is built on this base.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import anyio
import httpx
from pydantic import SecretStr, TypeAdapter, ValidationError

from tracker_client.capabilities import NULLTICKETS, NULLTICKETS_LEASE_TTL_MS, Capabilities
from tracker_client.errors import ConfigError, TrackerRejected, Unsupported
from tracker_client.nulltickets.transport import (
    DEFAULT_MAX_REQUEST_BYTES,
    Auth,
    HttpCore,
    RetrySettings,
    dumps,
    loads,
)

__all__ = ["NULLTICKETS_LEASE_TTL_MS", "Advertised", "RemoteBase", "declared"]

log = logging.getLogger("backlog_worker.tracker.remote")


M = TypeVar("M")

_FLOAT_OPTIONS = (
    "timeout_s",
    "connect_timeout_s",
    "poll_interval_s",
    "retry_initial_s",
    "retry_max_wait_s",
    "retry_budget_s",
)
_INT_OPTIONS = ("max_request_bytes", "retry_attempts")


@dataclass(frozen=True)
class Advertised:
    """What the server said about itself in ``GET /health``.

    A plain NullTickets server advertises nothing; ``backlog-worker tracker serve`` lists its
    extension routes in ``"extensions"`` and its own request limit in ``"limits"``.
    """

    extensions: frozenset[str] = field(default_factory=frozenset)
    max_request_bytes: int | None = None

    @classmethod
    def from_health(cls, doc: Any) -> Advertised:
        """Read the capability fields of a ``/health`` answer (absent on NullTickets)."""
        if not isinstance(doc, dict):
            return cls()
        raw = doc.get("extensions")
        names = frozenset(x for x in raw if isinstance(x, str)) if isinstance(raw, list) else None
        limits = doc.get("limits")
        limit = limits.get("max_request_bytes") if isinstance(limits, dict) else None
        return cls(
            extensions=names or frozenset(),
            max_request_bytes=limit if isinstance(limit, int) and limit > 0 else None,
        )


def declared(caps: Advertised) -> Capabilities:
    """The typed capabilities a served rail's advertised extension names stand for."""
    ext = caps.extensions
    if not ext:
        return NULLTICKETS
    return Capabilities(
        answers_can_be_lost=True,
        max_lease_ttl_ms=None if "heartbeat_ttl" in ext else NULLTICKETS_LEASE_TTL_MS,
        max_request_bytes=caps.max_request_bytes,
        backlog_ops={"cancel", "cancel_all", "requeue", "maintenance"} <= ext,
        wait={"wait", "wait_for_work"} <= ext,
        run_details={"runs", "task_events", "fail_result"} <= ext,
        task_extensions="backlog" in ext,
        release="release" in ext,
        strict_definitions="backlog" in ext,
        strict_limits=caps.max_request_bytes is not None,
        extensions=ext,
    )


def _coerce(name: str, value: Any, kind: type) -> Any:
    """Coerce an option that may arrive as a string (URL query, config file)."""
    if value is None or isinstance(value, kind):
        return value
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"remote tracker option {name}={value!r}: expected {kind.__name__}"
        ) from exc


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """Split ``http://host:port/?timeout_s=5`` into the base URL and its option query."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"tracker url {url!r}: expected http://host:port or https://host:port")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    known = set(_FLOAT_OPTIONS) | set(_INT_OPTIONS)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"tracker url {url!r}: unknown option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return base, options


class RemoteBase:
    """Options, the HTTP core and capability detection shared by the client's operations."""

    def __init__(
        self,
        url: str,
        *,
        api_token: str | SecretStr | None = None,
        timeout_s: float | str = 10.0,
        connect_timeout_s: float | str = 5.0,
        retry: RetrySettings | None = None,
        retry_attempts: int | str | None = None,
        retry_initial_s: float | str | None = None,
        retry_max_wait_s: float | str | None = None,
        retry_budget_s: float | str | None = None,
        max_request_bytes: int | str = DEFAULT_MAX_REQUEST_BYTES,
        poll_interval_s: float | str = 1.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base, query = split_url(url)
        opts: dict[str, Any] = {
            "timeout_s": timeout_s,
            "connect_timeout_s": connect_timeout_s,
            "retry_attempts": retry_attempts,
            "retry_initial_s": retry_initial_s,
            "retry_max_wait_s": retry_max_wait_s,
            "retry_budget_s": retry_budget_s,
            "max_request_bytes": max_request_bytes,
            "poll_interval_s": poll_interval_s,
        }
        opts.update(query)
        for name in _FLOAT_OPTIONS:
            opts[name] = _coerce(name, opts[name], float)
        for name in _INT_OPTIONS:
            opts[name] = _coerce(name, opts[name], int)
        retry = retry or RetrySettings()
        try:
            retry = RetrySettings(
                attempts=opts["retry_attempts"]
                if opts["retry_attempts"] is not None
                else retry.attempts,
                initial_s=opts["retry_initial_s"]
                if opts["retry_initial_s"] is not None
                else retry.initial_s,
                max_wait_s=opts["retry_max_wait_s"]
                if opts["retry_max_wait_s"] is not None
                else retry.max_wait_s,
                budget_s=opts["retry_budget_s"]
                if opts["retry_budget_s"] is not None
                else retry.budget_s,
            )
        except ValueError as exc:
            raise ConfigError(f"remote tracker: {exc}") from exc
        if opts["timeout_s"] <= 0 or opts["connect_timeout_s"] <= 0:
            raise ConfigError("remote tracker: timeout_s and connect_timeout_s must be > 0")
        if opts["max_request_bytes"] < 2_048:
            raise ConfigError("remote tracker: max_request_bytes must be >= 2048")
        if opts["poll_interval_s"] <= 0:
            raise ConfigError("remote tracker: poll_interval_s must be > 0")
        token = api_token.get_secret_value() if isinstance(api_token, SecretStr) else api_token
        self.url = base
        self.poll_interval_s: float = opts["poll_interval_s"]
        self._configured_max_request_bytes: int = opts["max_request_bytes"]
        self._http = HttpCore(
            base,
            api_token=token or None,
            timeout_s=opts["timeout_s"],
            connect_timeout_s=opts["connect_timeout_s"],
            retry=retry,
            max_request_bytes=opts["max_request_bytes"],
            transport=transport,
        )
        self._caps: Advertised | None = None
        self._caps_lock = anyio.Lock()
        self._closed = False
        self._warned: set[str] = set()
        self._pipelines: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- capabilities -------------------------------------------------------------------------
    @property
    def advertised(self) -> Advertised | None:
        """What ``/health`` advertised; None until the first request."""
        return self._caps

    async def capabilities(self) -> Capabilities:
        """What this server can do, from ``/health`` (read once; a plain NullTickets: nothing)."""
        return declared(await self._capabilities())

    @property
    def max_lease_ttl_ms(self) -> int | None:
        """The longest lease the server keeps across heartbeats (None = no limit).

        A NullTickets heartbeat resets the lease to 300 s: a worker must heartbeat more often
        than that whatever TTL it asked. Known for sure after the first request; until then the
        safe value (300 s) is reported.
        """
        if self._caps is not None and "heartbeat_ttl" in self._caps.extensions:
            return None
        return NULLTICKETS_LEASE_TTL_MS

    def _set_caps(self, caps: Advertised) -> None:
        self._caps = caps
        self._http.max_request_bytes = caps.max_request_bytes or self._configured_max_request_bytes

    async def _capabilities(self) -> Advertised:
        if self._caps is None:
            async with self._caps_lock:
                if self._caps is None:
                    response = await self._http.send("GET", "/health", auth="public")
                    self._set_caps(Advertised.from_health(loads(response, "GET /health")))
        assert self._caps is not None
        return self._caps

    async def _has(self, extension: str) -> bool:
        return extension in (await self._capabilities()).extensions

    async def _require(self, extension: str, operation: str) -> None:
        if not await self._has(extension):
            raise Unsupported(
                f"{operation} is not supported by the tracker at {self.url}: a NullTickets server "
                "has no such endpoint (it works on the embedded tracker and on "
                "`backlog-worker tracker serve`)",
                code="unsupported",
            )

    def _warn_once(self, key: str, message: str, **extra: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, extra={"action": key, **extra})

    # -- request helpers ----------------------------------------------------------------------
    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw: bytes | None = None,
        auth: Auth = "admin",
        lease_token: str | None = None,
        idempotency_key: str | None = None,
        lease_route: bool = False,
        read_timeout_s: float | None = None,
        retry: bool = True,
    ) -> httpx.Response:
        await self._capabilities()
        data = raw if raw is not None else (dumps(body) if body is not None else None)
        return await self._http.send(
            method,
            path,
            body=data,
            auth=auth,
            lease_token=lease_token,
            idempotency_key=idempotency_key,
            lease_route=lease_route,
            read_timeout_s=read_timeout_s,
            retry=retry,
        )

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._call(method, path, **kwargs)
        return loads(response, f"{method} {path.split('?')[0]}")

    @staticmethod
    def _parse(adapter: type[M] | TypeAdapter[M], data: Any, what: str) -> M:
        try:
            if isinstance(adapter, TypeAdapter):
                return adapter.validate_python(data)
            validated: M = _adapter(adapter).validate_python(data)
            return validated
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(root)"
            raise TrackerRejected(
                f"{what}: the tracker's answer has an unexpected shape at {where}: {first['msg']}",
                code="invalid_response",
            ) from exc

    @staticmethod
    def _key(idempotency_key: str | None) -> str:
        """The caller's key for this logical write, or a fresh one (reused across retries)."""
        return idempotency_key if idempotency_key else str(uuid.uuid4())

    @staticmethod
    def _check_limit(limit: int, what: str) -> None:
        if not 1 <= limit <= 1000:
            raise_limit(limit, what)

    async def aclose(self) -> None:
        """Close the HTTP client. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._http.aclose()


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(model: Any) -> TypeAdapter[Any]:
    """One TypeAdapter per model (building one costs far more than validating with it)."""
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    return adapter


def raise_limit(limit: int, what: str) -> None:
    """Refuse a page size the server would refuse (1..1000)."""
    from tracker_client.errors import ValidationFailed

    raise ValidationFailed(f"{what}: limit must be 1..1000, got {limit}", code="invalid_limit")


def params(**values: object | None) -> Mapping[str, object | None]:
    """Query parameters, in the order given (None values are dropped when encoded)."""
    return values
