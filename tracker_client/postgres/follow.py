"""Following a task's events on the PostgreSQL rail (extension ``follow``), on every host.

``follow_task`` is the rail's long poll (:meth:`tracker_client.rules.rail.Rail.follow_task`: the
same checks and the same ``follow_state`` read) with PostgreSQL's wake-ups
(:class:`FollowChannel`, the engine's :meth:`~.engine.PgEngine.follow`). A follower must wake for an
event or a state change written by ANY host, and those writes (events, claims) are the ones the
workers' channel leaves quiet (:mod:`.wake`), so followers have a channel of their own:

* an instance with followers LISTENs on the follow channel (a :class:`~.wake.Listener` of its
  own, started by the first follower) and keeps a row in ``followers`` (schema 5) alive, with an
  expiry on the server's clock a little past its longest wait;
* every write but a heartbeat or a store/trace/registry write queues
  :func:`notify_sql` before its ``COMMIT``: a ``pg_notify`` on the follow channel sent only while
  a live ``followers`` row exists, so a rail nobody follows pays one index probe per write and
  no NOTIFY (whose commit-time queue lock would serialise the writers);
* the instance's own writes wake its followers in process (``Changes.wake_followers``).

A notification racing the first read of a follow is covered by a short safety tick
(:data:`FOLLOW_TICK_S`). This room writes only the ``followers`` table.
"""

from __future__ import annotations

import contextlib
import hashlib

import anyio
from psycopg import sql

from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS, PgConn, Prepared
from tracker_client.postgres.wake import Listener
from tracker_client.rules.engine import Changes

__all__ = [
    "FOLLOW_QUIET",
    "FOLLOW_TICK_S",
    "FollowChannel",
    "follow_channel",
    "notify_prepared",
    "notify_sql",
]

#: Writes that change nothing a follower reads (events, stage, dead-letter reason).
FOLLOW_QUIET = frozenset(
    {"heartbeat", "store_put", "store_delete", "store_delete_namespace", "purge", "vacuum"}
    | {"ingest_traces", "ingest_trace_blob", "register_worker", "forget_worker"}
)
#: A following instance's row outlives its longest wait by this much (seconds).
INTEREST_MARGIN_S = 30
#: A follower with a live listener still looks this often (a write racing its first read).
FOLLOW_TICK_S = 1.0
#: How long the first follower waits for ``LISTEN`` before it polls instead.
LISTEN_START_S = 5.0

# These run on the raw connection (no domain rule is involved, so the write lock's shared mode,
# which the dialect polices, does not apply to them): postgres/sql/follow.sql.
_INTEREST = STATEMENTS["follow.interest"]
_FORGET_STALE = STATEMENTS["follow.forget_stale"]
_FORGET_INSTANCE = STATEMENTS["follow.forget_instance"]


def follow_channel(schema: str) -> str:
    """The follow NOTIFY channel of a rail (an identifier under PostgreSQL's 63 bytes)."""
    return "backlog_f_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


def notify_sql(channel: str, instance: str) -> str:
    """The statement a write runs before ``COMMIT`` (``follow.notify`` with ``channel`` and
    ``instance`` bound as literals), ending in ``;``."""
    literal = {"channel": sql.Literal(channel), "instance": sql.Literal(instance)}
    return (
        STATEMENTS["follow.notify"].format(**{k: v.as_string() for k, v in literal.items()}) + ";"
    )


def notify_prepared(channel: str, instance: str) -> Prepared:
    """:func:`notify_sql`, and the same statement for a create's one round trip: prepared
    once per connection (``channel`` and ``instance`` its parameters), where the plain text
    was planned at every create (~25 us of the server's time, docs/benchmarks/postgresql.md)."""
    literals = [sql.Literal(v).as_string() for v in (channel, instance)]
    name = "_bw_follow_notify"
    return Prepared(
        name=name,
        query=STATEMENTS["follow.notify"].format(channel="%s", instance="%s"),
        plain=notify_sql(channel, instance),
        execute=f"EXECUTE {name}({', '.join(literals)});",
    )


class FollowChannel:
    """This instance's follow listener and ``followers`` row (part of the engine)."""

    def __init__(
        self, db: Database, instance: str, changes: Changes, poll_interval_s: float
    ) -> None:
        self._db = db
        self._instance = instance
        self._changes = changes
        self._poll_interval_s = poll_interval_s
        self._follow_listener: Listener | None = None
        #: ``anyio.current_time()`` until which this instance's ``followers`` row is known alive.
        self._interest_until = 0.0

    async def interest(self, wait_s: float) -> float:
        """Listen on the follow channel and keep this instance's row alive; the safety tick."""
        listener = self._follow_listener
        listen = self._db.listen_conninfo
        if listen is None:  # behind a PgBouncer with no direct address: poll
            return self._poll_interval_s
        if listener is None:
            listener = self._follow_listener = Listener(
                listen,
                follow_channel(self._db.schema),
                self._instance,
                self._changes.wake_followers,
            )
            await anyio.to_thread.run_sync(listener.wait_listening, LISTEN_START_S)
        now = anyio.current_time()
        if self._interest_until < now + wait_s + 1:
            lasts = int(wait_s) + INTEREST_MARGIN_S

            def register(conn: PgConn) -> None:
                conn.raw.execute(_FORGET_STALE.encode())
                conn.raw.execute(_INTEREST.encode(), (self._instance, lasts))

            await self._db.run(register, "follow_task", write=True, shared=True)
            self._interest_until = now + lasts
        return FOLLOW_TICK_S if listener.healthy else self._poll_interval_s

    async def aclose(self) -> None:
        """Stop following: the follow listener and this instance's row go. Idempotent."""
        listener, self._follow_listener = self._follow_listener, None
        if listener is not None:
            await anyio.to_thread.run_sync(listener.stop())
            with contextlib.suppress(Exception):  # best effort: the row expires anyway
                await self._db.run(
                    lambda conn: conn.raw.execute(_FORGET_INSTANCE.encode(), (self._instance,)),
                    "follow_task",
                    write=True,
                    shared=True,
                )
