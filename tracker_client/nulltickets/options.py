"""The NullTickets client's options, parsed once: :class:`ClientOptions` and :class:`RetrySettings`.

Options arrive as keyword arguments (``RemoteTracker(url, timeout_s=5)``, the ``[tracker.options]``
table of a worker config) or as URL query parameters (``http://host:7700?timeout_s=5``, which win);
strings are coerced, since both a URL and a config file may carry them as text. They are checked
and frozen here, then handed to the parts that use them (the transport reads the timeouts, the
retry settings and the size guard; ``wait`` reads the poll interval).

The client does not retry unless asked: with no ``retry``/``retry_*`` option a call is tried
once and a transient failure (``TrackerUnavailable``) reaches the caller, who owns the retry
budget (the worker's lease session, bounded by the lease). Operator commands ask for
:data:`OPERATOR_RETRY`.

Pure data: imports the exception tree only (so an operator command may build settings without
loading the HTTP stack).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, TypedDict
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from tracker_client.errors import ConfigError
from tracker_client.nulltickets.codec import DEFAULT_MAX_ANSWER_BYTES
from tracker_client.urlmask import mask_url

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "NO_RETRY",
    "OPERATOR_RETRY",
    "ClientOptionArgs",
    "ClientOptions",
    "RetrySettings",
    "split_url",
]

#: The real server drops requests over 65,536 bytes (request line + headers + body) unanswered.
DEFAULT_MAX_REQUEST_BYTES = 60_000


@dataclass(frozen=True)
class RetrySettings:
    """How transient failures (``TrackerUnavailable``) are retried, when retrying is asked for.

    ``attempts`` counts the first try (1 = no retry). Waits are exponential from ``initial_s``
    with full jitter, each at most ``max_wait_s``; retrying stops once ``budget_s`` seconds have
    passed since the first try. Every retry of one logical call reuses its idempotency key and
    body bytes. The field defaults are what ``RetrySettings()`` (an explicit request for
    retries, e.g. :data:`OPERATOR_RETRY`) means; the client's own default is :data:`NO_RETRY`.
    """

    attempts: int = 6
    initial_s: float = 0.1
    max_wait_s: float = 5.0
    budget_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"retry attempts must be >= 1, got {self.attempts}")
        for name in ("initial_s", "max_wait_s", "budget_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"retry {name} must be >= 0, got {getattr(self, name)}")

    @property
    def retries(self) -> bool:
        """True when a failed try may be tried again (``attempts > 1``)."""
        return self.attempts > 1


#: The client's default: one try per call; the caller retries (or not) in its own layer.
NO_RETRY = RetrySettings(attempts=1)
#: What operator commands ask for: a short outage is ridden out (6 tries within 30 s).
OPERATOR_RETRY = RetrySettings()


class ClientOptionArgs(TypedDict, total=False):
    """The keyword options of :class:`~tracker_client.nulltickets.client.RemoteTracker` (and of
    ``open_tracker`` for an ``http(s)://`` URL); each may also be a string."""

    timeout_s: float | str
    connect_timeout_s: float | str
    #: The base retry settings; ``retry_*`` options (and URL parameters) override single fields.
    retry: RetrySettings | None
    retry_attempts: int | str | None
    retry_initial_s: float | str | None
    retry_max_wait_s: float | str | None
    retry_budget_s: float | str | None
    max_request_bytes: int | str
    max_answer_bytes: int | str
    poll_interval_s: float | str


#: Options a URL query may carry, with the type a string is coerced to.
_KINDS: dict[str, type] = {
    "timeout_s": float,
    "connect_timeout_s": float,
    "poll_interval_s": float,
    "retry_initial_s": float,
    "retry_max_wait_s": float,
    "retry_budget_s": float,
    "max_request_bytes": int,
    "max_answer_bytes": int,
    "retry_attempts": int,
}
#: ``retry_<name>`` option -> ``RetrySettings`` field.
_RETRY_FIELDS = {f"retry_{f.name}": f.name for f in fields(RetrySettings)}


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
        raise ConfigError(
            f"tracker url {mask_url(url)!r}: expected http://host:port or https://host:port"
        )
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - set(_KINDS))
    if unknown:
        raise ConfigError(
            f"tracker url {mask_url(url)!r}: unknown option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(_KINDS))})"
        )
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return base, options


@dataclass(frozen=True)
class ClientOptions:
    """Every option of one client, checked: what the transport and the parts are built from."""

    #: The base URL, without the option query or a trailing ``/``.
    url: str
    #: The admin bearer token (None: the server has none); never shown by ``repr``.
    api_token: str | None = field(default=None, repr=False)
    #: Read/write timeout per request (a long poll adds its own wait to it).
    timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    retry: RetrySettings = NO_RETRY
    #: The request size guard for a server that advertises no limit of its own.
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    #: The largest answer read; more is refused as it arrives (``AnswerRefused``).
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    #: How often ``wait`` polls a plain NullTickets server (it has no long poll).
    poll_interval_s: float = 1.0

    @classmethod
    def parse(cls, url: str, *, api_token: str | None = None, **given: Any) -> ClientOptions:
        """The options of ``url`` (its query wins) over ``given``; ``ConfigError`` names a bad
        one. ``given`` takes the names of :class:`ClientOptionArgs` (``retry`` and ``retry_*``
        included)."""
        base, query = split_url(url)
        unknown = sorted(set(given) - set(_KINDS) - {"retry"})
        if unknown:
            raise TypeError(f"RemoteTracker: unknown option(s) {', '.join(unknown)}")
        retry = given.pop("retry", None) or NO_RETRY
        opts = {name: _coerce(name, value, _KINDS[name]) for name, value in given.items()}
        opts.update({name: _coerce(name, value, _KINDS[name]) for name, value in query.items()})
        changes = {_RETRY_FIELDS[n]: v for n, v in opts.items() if n in _RETRY_FIELDS}
        try:
            retry = replace(retry, **{k: v for k, v in changes.items() if v is not None})
        except ValueError as exc:
            raise ConfigError(f"remote tracker: {exc}") from exc
        plain = {k: v for k, v in opts.items() if k not in _RETRY_FIELDS and v is not None}
        options = cls(url=base, api_token=api_token or None, retry=retry, **plain)
        options._check()
        return options

    def _check(self) -> None:
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ConfigError("remote tracker: timeout_s and connect_timeout_s must be > 0")
        if self.max_request_bytes < 2_048:
            raise ConfigError("remote tracker: max_request_bytes must be >= 2048")
        if self.poll_interval_s <= 0:
            raise ConfigError("remote tracker: poll_interval_s must be > 0")
        if self.max_answer_bytes < 65_536:
            raise ConfigError("remote tracker: max_answer_bytes must be >= 65536")
