"""``postgresql://`` URLs: the connection, the rail's own options, and the shared rail options.

``postgresql://user[:password]@host[:port]/db?schema=backlog&pool_size=10&statement_timeout_ms=30000``

* ``schema``: the PostgreSQL schema holding the rail (a lowercase identifier; default ``backlog``).
  Several rails can share a database, one schema each.
* ``pool_size``: the most connections this process opens (1..1000; default 10): half of them
  (at least one) are the hot path's async connections, the rest the thread pool's (at least
  one), plus a wake-up listener.
* ``statement_timeout_ms``: PostgreSQL's ``statement_timeout`` for every statement (0 = none;
  default 30000). A statement past it is rolled back and answered ``TrackerUnavailable``.
* ``pgbouncer``: ``transaction`` when the URL names a PgBouncer in transaction pooling mode
  (default ``off``): no session state is relied on (``search_path`` and ``statement_timeout``
  are set per transaction, no server-side prepared statements, no one-statement hot path) and
  the wake-up listener does not go through the bouncer (see docs/operate/postgresql.md).
* ``claim_ahead``: ``on`` (default) or ``off``. On, a worker draining a role through this
  process has its next batch claimed together with its last batch's final reports, and held
  here until it asks (at most a second; released, uncounted, when not taken): one WAL flush
  fewer per batch, and the runs start without waiting for it (see
  :mod:`~tracker_client.ahead`).
* ``listen_host`` / ``listen_port``: the PostgreSQL server itself, for the wake-up listener
  only (``LISTEN`` needs a session); same user, password and database as the URL. With
  ``pgbouncer=transaction`` and neither, waiters poll every ``poll_interval_s`` instead.
* the embedded rail's options (``max_backlog_depth``, ``role_backlog_depth``,
  ``max_stale_attempts``, ``idempotency_ttl_s``, ``poll_interval_s``, ``retention_days``,
  ``retry_*``), with the same meaning;
* anything else is a libpq connection parameter (``sslmode``, ``application_name``, ...).

No I/O: parsing only. Each bad value is a ``ConfigError`` naming the option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from tracker_client.errors import ConfigError
from tracker_client.urlmask import mask_url

__all__ = [
    "AHEAD_MODES",
    "BOUNCER_MODES",
    "MIGRATE_MODES",
    "PgOptions",
    "own_option_hint",
    "parse_postgres_url",
]

#: The values of the ``migrate`` option.
MIGRATE_MODES = ("auto", "never")
#: The values of the ``pgbouncer`` option.
BOUNCER_MODES = ("off", "transaction")
_OWN = ("schema", "pool_size", "statement_timeout_ms", "migrate", "pgbouncer", "claim_ahead")
#: The values of the ``claim_ahead`` option.
AHEAD_MODES = ("on", "off")
_LISTEN = ("listen_host", "listen_port")

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: The embedded rail's options, which the PostgreSQL rail honours the same way.
SHARED = frozenset(
    {
        "max_backlog_depth",
        "role_backlog_depth",
        "max_stale_attempts",
        "idempotency_ttl_s",
        "poll_interval_s",
        "retention_days",
        "retry_max_attempts",
        "retry_delay_ms",
        "retry_backoff",
        "retry_max_delay_ms",
    }
)


@dataclass(frozen=True)
class PgOptions:
    """The rail's own settings (the shared ones go to the embedded option parser)."""

    schema: str = "backlog"
    pool_size: int = 10
    statement_timeout_ms: int = 30_000
    #: ``auto``: an open migrates a schema that is behind (the role needs CREATE for that
    #: only); ``never``: it refuses one, naming ``backlog-worker rail migrate``
    #: (:mod:`~tracker_client.postgres.migrate`).
    migrate: str = "auto"
    #: ``transaction``: the URL names a PgBouncer in transaction pooling mode.
    pgbouncer: str = "off"
    #: libpq's connection string of the wake-up listener: the URL's own (``""``: same as the
    #: rail's), the server itself (``listen_host``/``listen_port``), or None: no listener,
    #: waiters poll (``pgbouncer=transaction`` without a direct address).
    listen_conninfo: str | None = ""
    #: Claim a busy worker's next batch with its reports (:mod:`~tracker_client.ahead`).
    claim_ahead: bool = True


def _int(name: str, value: Any, low: int, high: int) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        n = int(value.strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"postgresql tracker option {name}: expected an integer, got {value!r}"
        ) from None
    if not low <= n <= high:
        raise ConfigError(f"postgresql tracker option {name}: must be {low}..{high}, got {n}")
    return n


def parse_postgres_url(
    url: str, extra: dict[str, Any]
) -> tuple[str, PgOptions, dict[str, Any], str]:
    """(libpq conninfo, rail options, shared rail options, the URL to show). ``ConfigError``."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise ConfigError(f"not a postgresql:// url: {mask_url(url)!r}")
    if not parts.path.strip("/"):
        raise ConfigError(f"tracker url {mask_url(url)!r} names no database (postgresql://host/db)")
    query = {**dict(parse_qsl(parts.query, keep_blank_values=True)), **extra}
    own: dict[str, Any] = {}
    shared: dict[str, Any] = {}
    libpq: dict[str, str] = {}
    for key, value in query.items():
        if key in _OWN or key in _LISTEN:
            own[key] = value
        elif key in SHARED:
            shared[key] = value
        elif isinstance(value, str):
            libpq[key] = value
        else:
            raise ConfigError(f"unknown postgresql tracker option {key!r}")
    schema = str(own.get("schema", "backlog"))
    if not _SCHEMA.match(schema):
        raise ConfigError(
            f"postgresql tracker option schema: expected a lowercase identifier "
            f"(letters, digits, _; at most 63), got {schema!r}"
        )
    migrate = str(own.get("migrate", "auto")).strip().lower()
    if migrate not in MIGRATE_MODES:
        raise ConfigError(
            f"postgresql tracker option migrate: expected auto or never, got {migrate!r}"
        )
    bouncer = str(own.get("pgbouncer", "off")).strip().lower()
    if bouncer not in BOUNCER_MODES:
        raise ConfigError(
            f"postgresql tracker option pgbouncer: expected off or transaction, got {bouncer!r}"
            " (session pooling needs no option; statement pooling is not supported)"
        )
    ahead = str(own.get("claim_ahead", "on")).strip().lower()
    if ahead not in AHEAD_MODES:
        raise ConfigError(
            f"postgresql tracker option claim_ahead: expected on or off, got {ahead!r}"
        )
    conninfo = urlunsplit(parts._replace(query=urlencode(libpq)))
    opts = PgOptions(
        claim_ahead=ahead == "on",
        schema=schema,
        migrate=migrate,
        pgbouncer=bouncer,
        listen_conninfo=_listen_conninfo(parts, libpq, own, bouncer),
        pool_size=_int("pool_size", own.get("pool_size", 10), 1, 1000),
        statement_timeout_ms=_int(
            "statement_timeout_ms", own.get("statement_timeout_ms", 30_000), 0, 86_400_000
        ),
    )
    return conninfo, opts, shared, mask_url(_shown(parts, query))


def own_option_hint(conninfo: str) -> str:
    """A hint for libpq's refusal of a URL parameter: one close to the rail's own options
    (``pool_sise``) is that option misspelt, which libpq, knowing only its own, cannot say."""
    import difflib  # an error's path only

    names = sorted({*_OWN, *_LISTEN, *SHARED})
    for key, _value in parse_qsl(urlsplit(conninfo).query, keep_blank_values=True):
        close = difflib.get_close_matches(key, names, n=1)
        if close:
            return f" (did you mean the rail's option {close[0]!r}?)"
    return ""


def _listen_conninfo(
    parts: SplitResult, libpq: dict[str, str], own: dict[str, Any], bouncer: str
) -> str | None:
    """The wake-up listener's conninfo (see :attr:`PgOptions.listen_conninfo`)."""
    host = own.get("listen_host")
    port = own.get("listen_port")
    if host is None and port is None:
        return None if bouncer == "transaction" else ""
    host = str(host if host is not None else parts.hostname or "").strip()
    if not host:
        raise ConfigError("postgresql tracker option listen_host: expected a host name, got ''")
    port_n = _int("listen_port", port if port is not None else parts.port or 5432, 1, 65535)
    if (host, port_n) == (parts.hostname or "", parts.port or 5432):
        raise ConfigError(
            f"postgresql tracker options listen_host/listen_port: {host}:{port_n} is the URL's"
            " own address; they name the PostgreSQL server itself (not the PgBouncer in front"
            " of it), whose sessions keep a LISTEN"
        )
    return urlunsplit(parts._replace(query=urlencode({**libpq, "host": host, "port": str(port_n)})))


def _shown(parts: SplitResult, query: dict[str, Any]) -> str:
    """The URL as the operator wrote it, for messages: every option kept (the ``schema`` the
    rows are in, a ``passfile=/path`` as a path, not percent-encoded); the caller masks it."""
    pairs = {key: str(value) for key, value in query.items()}
    return urlunsplit(parts._replace(query=urlencode(pairs, safe="/:")))
