"""``PostgresTracker``: the :class:`~tracker_client.protocol.Tracker` on a PostgreSQL schema.

It is :class:`~tracker_client.rules.rail.Rail` (every operation, once, over the rules; one
source for docs/guarantees/backlog.md) on the PostgreSQL engine (:class:`~.engine.PgEngine`:
pooled transactions, each statement PostgreSQL's own (``postgres/sql``, run by :mod:`.dialect`),
``LISTEN/NOTIFY`` wake-ups, followers on a channel of their own). What
PostgreSQL does its own way is here, and only that: the claim and ``claim_many`` (one
statement, ``FOR UPDATE SKIP LOCKED``, :mod:`.claims`), the one-round-trip transition and
``finish_many``, the store search (``tsvector``, :mod:`.search`), span inserts (:mod:`.spans`),
``health``'s version and the declared capabilities.

The one-round-trip transition (``bw_transition``, schema 6). A worker's plain transition (no
``wait_for``) is the most frequent write after the claim. The rail's ``transition`` reads the
lease, works out the move from the pipeline and writes; over a network each of those is a round
trip. Here the move is worked out first, in Python, from what this instance handed out: a claim
remembers its lease's pipeline and stage (:meth:`PostgresTracker._remember`), and the pipeline
is the cached, parsed one (the rules' own: ``find``, ``role_of``, ``is_terminal``, the event's
text, the idempotency fingerprint and record). The function then checks, with the task's row
locked, that the lease is live under this token and the task still in that pipeline and stage,
and writes; ``bw_transition_tx`` (schema 9) takes the write lock (shared) and sends the
wake-ups itself, one prepared statement in its own transaction
(:meth:`.db.Database.one_call`). Whenever it cannot answer exactly (a lease it did not hand
out, an unknown move, a replayed key, a lost lease, a moved task, a ``task_finished`` line to
write, which wants the queue depth) it writes nothing and the rail's ``transition`` runs, which
answers it.

``finish_many``: a batch of plain transitions in ONE round trip. A worker sends the final
reports of runs ending together as one ``finish_many``. The rail's ``finish_many`` writes each
item with ``finish``'s reads and savepoints: several statements per item, under the write lock
held alone. Here the items that are plain transitions of leases this instance handed out (no
events, no ``wait_for``: the worker's usual report) are worked out as the one-trip transition
works them out (:meth:`PostgresTracker._plan_move`, keyed as a ``finish`` is: same
fingerprint, same recorded answer) and written by ``bw_finish_many`` (schema 8) in one
statement: ``bw_finish_many_tx`` (schema 9) takes the shared write lock, runs it over the batch
(one JSON parameter) and sends the wake-ups. Every other item (a fail, events, a lease handed
out by another instance), every item the function answers it did not write (a lost lease, a
replayed key, a moved task: it writes nothing for them) and the whole batch when the call
declines go to the rail's ``finish_many`` in a second call, which answers them exactly. Items
are independent, as ``finish_many``'s are, so writing them in two calls changes no answer.

Claiming ahead (:mod:`.ahead`, option ``claim_ahead``): while one agent drains a role through
this instance, its ``finish_many`` also claims a batch in the same statement while fewer than
two are kept, and its next ``claim_many`` (or one-lease ``claim``) is answered from those leases
without a round trip; one no claim takes is withdrawn (no run left, the attempt count as it was).
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _encode_string
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

import anyio

from tracker_client.ahead import ClaimAhead, Granted, Kept
from tracker_client.capabilities import Capabilities, LeaseHandle, LeaseRef
from tracker_client.contract.batch_models import (
    FinishItem,
    FinishManyOutcome,
    FinishResult,
    check_items,
    per_state_of,
)
from tracker_client.contract.extensions import EXTENSIONS
from tracker_client.contract.parked_models import ParkedCancelled, check_parked
from tracker_client.errors import (
    ConfigError,
    Conflict,
    TrackerError,
    TrackerUnavailable,
    Unsupported,
)
from tracker_client.models import Lease, ReleaseResult, StoreEntry, TransitionResult
from tracker_client.postgres import claims, search
from tracker_client.postgres.claims import (
    CLAIM_CALL,
    array_literal,
    claim_many,
    lease_of,
    lease_of_row,
    refuse_leased,
)
from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS, Row
from tracker_client.postgres.engine import SAFETY_TICK_S, PgEngine
from tracker_client.postgres.follow import FOLLOW_QUIET
from tracker_client.postgres.idle import IdleLook
from tracker_client.postgres.options import parse_postgres_url
from tracker_client.postgres.spans import with_many
from tracker_client.postgres.standing import (
    STAND_CALL,
    Stand,
    StandingClaims,
    offering,
    stand_of,
)
from tracker_client.rules import budgets
from tracker_client.rules.claim_many import check_n, keyed_claim_many
from tracker_client.rules.claims import check_ttl, fresh_ids_many, reissue
from tracker_client.rules.common import (
    MIB,
    CorruptRow,
    Ctx,
    Options,
    dumps,
    task_from_row,
    will_log,
)
from tracker_client.rules.engine import QUIET_WRITES, Clock, wall_ms
from tracker_client.rules.finish import prepare
from tracker_client.rules.idempotency import fingerprint, idempotent
from tracker_client.rules.leasekeys import keyed_tokens, rail_key, stored_rail_key
from tracker_client.rules.options import parse_options
from tracker_client.rules.parked import attempt_key
from tracker_client.rules.pipelines import PipelineCache
from tracker_client.rules.rail import Rail
from tracker_client.rules.runs import token_hash
from tracker_client.rules.spans import store_spans
from tracker_client.sweeps import SweepCounts

if TYPE_CHECKING:
    import sqlite3

    # models a worker never builds (tracker_client.cold_models, observe_cold)
    from tracker_client.models import Health
    from tracker_client.observe_models import OtlpIngestResult

__all__ = ["MISSING_EXTENSIONS", "POSTGRES", "SAFETY_TICK_S", "PostgresTracker"]

_R = TypeVar("_R")

log = logging.getLogger("backlog_worker.tracker")

#: Extensions of the contract this rail does not serve yet (none now: spans, workers and follow
#: arrived after the rail); ``call`` answers ``Unsupported`` for their operations.
MISSING_EXTENSIONS: frozenset[str] = frozenset()

#: The PostgreSQL rail: the rail's rules, over a network connection (an answer can be lost
#: between the commit and the reply, so callers send idempotency keys).
POSTGRES = Capabilities(
    answers_can_be_lost=True,
    max_lease_ttl_ms=None,
    backlog_ops=True,
    wait=True,
    run_details=True,
    task_extensions=True,
    release=True,
    strict_definitions=True,
    strict_limits=True,
    extensions=frozenset(EXTENSIONS) - MISSING_EXTENSIONS,
)

VERSION = "backlog-worker-postgres/1"

#: The reason a lease claimed ahead and never handed out is released with (see .ahead).

#: Leases remembered per instance (the oldest forgotten first: its transition takes the
#: rail's path, nothing else changes).
REMEMBERED = 4096

#: ``bw_transition_tx`` (schema 9): the lock, wake-ups and ``bw_transition`` in one statement.
_CALL = STATEMENTS["hot.transition_tx"]
#: The order of ``bw_transition``'s / ``bw_move``'s parameters after the lock and wake-ups.
MOVE_FIELDS = (
    *("run", "token", "pipeline", "stage", "version", "to", "role", "terminal", "usage"),
    *("event", "now", "key", "fp", "result"),
)
#: ``bw_finish_many_tx`` (schema 9): the lock, wake-ups and the items' moves (since schema 20
#: one statement for the batch, ``bw_moves``: docs/benchmarks/postgresql.md).
_MANY_CALL = STATEMENTS["hot.finish_many_tx"]
#: An item's fields in ``bw_finish_many_tx``'s JSON (the call's ``now`` is the batch's).
_ITEM_FIELDS = tuple(f for f in MOVE_FIELDS if f != "now")
#: A move worked out (:meth:`PostgresTracker._plan_of`): its pipeline, the stage it leads to,
#: that stage's role, whether it is terminal, the ``transition`` event's JSON text, the
#: answer (a frozen model: one for every run making the move) and whether a run reporting no
#: usage may make it without a budget check (:func:`~tracker_client.rules.budgets.one_trip_ok`
#: of the pipeline, worked out once per move).
_Move = tuple[Any, str, str | None, int, str, TransitionResult, bool]
#: The JSON text of ``bw_finish_many_tx``'s items (one encoder: ``json.dumps`` with options
#: builds a new one on each call).
_ENCODE_ITEMS = json.JSONEncoder(separators=(",", ":")).encode
#: An item's fields that each run has its own of (the others repeat for every run making the
#: same move: their text is made once, :func:`_items_text`).
_OWN_FIELDS = ("run", "token", "key", "fp")
#: An item's fields that repeat from run to run (the move's), and their values of an item.
_SHARED_FIELDS = tuple(f for f in _ITEM_FIELDS if f not in _OWN_FIELDS)
_shared_of = operator.itemgetter(*_SHARED_FIELDS)
#: The fields of a transition item that one round trip writes (any other: the rail's path).
_PLAIN_FIELDS = frozenset(
    {"trigger", "expected_stage", "expected_task_version", "instructions", "usage", "wait_for"}
)


#: ``fingerprint``'s canonical JSON of a flat object (sorted keys, no spaces).
_CANONICAL_FLAT = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
#: Scalars a report's fields may hold for :func:`_fingerprint`'s short way.
_SCALARS = frozenset({str, int, bool, type(None)})


def _fingerprint(args: list[Any], texts: dict[Any, str]) -> str:
    """:func:`~tracker_client.rules.idempotency.fingerprint` of a plain report's arguments,
    the same digest made the short way when they are flat (strings, whole numbers, booleans,
    None, an empty list, objects of those): the canonical JSON of a list is its items' joined
    by commas, and the worker's report objects repeat from run to run (the same trigger,
    stage and version), so each object's text is made once (``texts``, by its keys, values
    and their types: ``1`` and ``True`` are not one key). Anything else: ``fingerprint``.
    A worker's report (``[run, token digest, [], object, None]``, a ``finish_many`` item) is
    made in one expression, without the walk over its five values."""
    if len(args) == 5:
        run, digest, events, body, fail = args
        if (
            type(run) is str
            and type(digest) is str
            and type(events) is list
            and not events
            and type(body) is dict
            and fail is None
        ):
            text = _flat_text(body, texts)
            if text is None:
                return fingerprint(args)
            whole = f"[{_encode_string(run)},{_encode_string(digest)},[],{text},null]"
            return hashlib.sha256(whole.encode()).hexdigest()
    parts: list[str] = []
    for value in args:
        kind = type(value)
        if kind is str:
            parts.append(_encode_string(value))
        elif kind is dict:
            text = _flat_text(value, texts)
            if text is None:
                return fingerprint(args)
            parts.append(text)
        elif value is None:
            parts.append("null")
        elif kind is list and not value:
            parts.append("[]")
        elif kind is int or kind is bool:
            parts.append(_CANONICAL_FLAT(value))
        else:
            return fingerprint(args)
    return hashlib.sha256(("[" + ",".join(parts) + "]").encode()).hexdigest()


def _items_text(items: list[dict[str, Any]], heads: dict[tuple[Any, ...], str]) -> str:
    """``bw_finish_many_tx``'s items as JSON text (an array of objects of
    :data:`_ITEM_FIELDS`): the same value as ``_ENCODE_ITEMS(items)``, made faster. The fields
    of the move (its pipeline, stages, event and recorded answer: two of them JSON text,
    escaped again at every item, ~3 us of an item's encoding) are the same for every run
    making it: their text is made once per distinct set (``heads``). Per item only its run
    id and key are escaped (as the encoder escapes a string); its token digest and
    fingerprint, hex digits made by this module, are quoted as they are. Same JSON value,
    ~1.3 us an item instead of ~2.6-3.7."""
    parts: list[str] = []
    for item in items:
        shared = _shared_of(item)
        head = heads.get(shared)
        if head is None:
            if len(heads) >= REMEMBERED:
                heads.clear()
            text = _ENCODE_ITEMS(dict(zip(_SHARED_FIELDS, shared, strict=True)))
            head = heads[shared] = text[:-1]  # without its closing brace
        key, fp = item["key"], item["fp"]
        key_text = "null" if key is None else _encode_string(key)
        # the token's digest and the fingerprint are hex digits: no character to escape
        fp_text = "null" if fp is None else '"' + fp + '"'
        run_text = _encode_string(item["run"])
        parts.append(
            f'{head},"run":{run_text},"token":"{item["token"]}","key":{key_text},"fp":{fp_text}}}'
        )
    return "[" + ",".join(parts) + "]"


def _flat_text(value: dict[Any, Any], texts: dict[Any, str]) -> str | None:
    """The canonical JSON of a flat object (see :func:`_fingerprint`), kept in ``texts`` by
    its keys, values and their types; None when it is not flat."""
    try:  # built by C calls: a generator per object cost ~0.3 us more
        key = (tuple(value.items()), tuple(map(type, value.values())))
        text = texts.get(key)
    except TypeError:  # a value that cannot be a key (a nested object)
        return None
    if text is None:
        if not all(type(k) is str and type(v) in _SCALARS for k, v in value.items()):
            return None
        if len(texts) >= REMEMBERED:
            texts.clear()
        text = texts[key] = _CANONICAL_FLAT(value)
    return text


class PostgresTracker(Rail[PgEngine]):
    """The PostgreSQL rail. Open it with ``await PostgresTracker.open("postgresql://...")``."""

    def __init__(
        self, engine: PgEngine, opts: Options, clock: Clock, sweeps: SweepCounts | None = None
    ) -> None:
        super().__init__(engine, opts, clock, sweeps)
        #: The rail's lease-token key (:mod:`tracker_client.rules.leasekeys`), read at open
        #: (migrating makes it), else on this instance's first keyed claim: made once per rail.
        self._rail_key: bytes | None = None
        #: run id -> (pipeline, stage) of the leases this instance handed out (see the module).
        self._leased: dict[str, tuple[str, str]] = {}
        #: (pipeline, stage, trigger) -> a move worked out (see :meth:`_plan_of`).
        self._moves: dict[tuple[str, str, str], _Move] = {}
        #: A planned move's answer (by its identity: one object per move planned, see
        #: :meth:`_plan_of`) -> that answer (kept, so the identity is not reused while the
        #: entry is), a plain transition's ``finish`` answer holding it and its recorded JSON
        #: text. Not by the answer's fields: each read of a model's field goes through its
        #: ``__getattr__`` hook (~400 instructions on CPython 3.11), four an item.
        self._answers: dict[int, tuple[TransitionResult, FinishResult, str]] = {}
        #: A report's object (its keys, values and their types) -> its canonical JSON text
        #: (see :func:`_fingerprint`).
        self._texts: dict[Any, str] = {}
        #: A move's fields of a ``finish_many`` item -> their JSON text (see :func:`_items_text`).
        self._heads: dict[tuple[Any, ...], str] = {}
        #: Leases claimed ahead with the reports of this instance's busy worker (see .ahead).
        self._ahead = ClaimAhead()
        # A create on the event loop takes its pipeline's version from the cache, checked
        # by the server at commit (see PgEngine.write).
        engine.known_version = self._known_version
        engine.versions_moved = self._versions_moved
        #: An idle parked claim's wait without writes (see .idle, IdleLook), standing while
        #: it sleeps (see .standing).
        self._standing = StandingClaims(engine.db, engine.channel, engine.instance)
        self._idle_look = IdleLook(
            engine, clock, self._parked.ended, self._standing, self._give_back
        )

    def _known_version(self, pid: str) -> int | None:
        """Pipeline ``pid``'s current version as this instance last read it, or None."""
        known = self._pipelines.cached(pid)
        return None if known is None else known.version

    def _versions_moved(self) -> None:
        """A create found a pipeline at another version: every version is read again."""
        self._pipelines = PipelineCache()

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        clock: Clock | None = None,
        sweeps: SweepCounts | None = None,
        **options: Any,
    ) -> Self:
        """Open (creating the schema and migrating if needed) the rail ``path`` names.

        ``path`` is a ``postgresql://`` URL (see :mod:`.options`); ``options`` add to its query.
        ``sweeps``: where every committed sweep of expired leases is counted
        (:mod:`tracker_client.sweeps`).
        ``ConfigError`` for a bad option, ``TrackerUnavailable`` when the server can't be
        reached, ``TrackerCorrupt`` for a schema that is not ours or is newer.
        """
        if clock is not None and not callable(clock):
            raise ConfigError("postgresql tracker option clock: must be a callable returning ms")
        conninfo, pg, shared, shown = parse_postgres_url(path, dict(options))
        opts = parse_options(shared)
        db = await Database.open(
            conninfo,
            schema=pg.schema,
            shown=shown,
            pool_size=pg.pool_size,
            statement_timeout_ms=pg.statement_timeout_ms,
            migrate=pg.migrate,
            bouncer=pg.pgbouncer == "transaction",
        )
        if pg.listen_conninfo != "":
            db.listen_conninfo = pg.listen_conninfo
        tracker = cls(PgEngine(db, opts.poll_interval_s), opts, clock or wall_ms, sweeps)
        tracker._ahead.enabled = pg.claim_ahead
        # The one-statement claim derives a keyed claim's token before it is sent: read once.
        tracker._rail_key = await tracker._read("rail_key", stored_rail_key)
        if tracker._rail_key is not None:  # a create's grants come in a NOTIFY (.standing)
            tracker._engine.grants = tracker._standing.grants_on(tracker._rail_key)
        return tracker

    async def capabilities(self) -> Capabilities:
        """The rail's capabilities minus the extensions not here yet; answers over a network
        can be lost, so callers send idempotency keys."""
        return POSTGRES

    async def health(self) -> Health:
        """Tasks per stage and live leases; ``TrackerUnavailable`` when the server is down."""
        found = await super().health()
        return found.model_copy(update={"version": VERSION})

    async def store_search(
        self,
        query: str,
        *,
        namespace: str | None = None,
        limit: int = 10,
        filter_path: str | None = None,
        filter_value: str | None = None,
    ) -> list[StoreEntry]:
        """Full-text search: every word must match (as a phrase); rank order."""
        return await self._read(
            "store_search",
            lambda c: search.search(c, query, namespace, limit, filter_path, filter_value),
        )

    async def ingest_traces(self, document: Mapping[str, Any]) -> OtlpIngestResult:
        """Store the spans of an OTLP/JSON ``ExportTraceServiceRequest`` (see
        :meth:`Rail.ingest_traces`): checked first, then one transaction, its spans inserted
        with one ``executemany`` (:mod:`.spans`)."""
        # imported here: a server's path, cold in a worker (issue 31, memory)
        from tracker_client.rules import otlpjson

        spans = await anyio.to_thread.run_sync(otlpjson.parse_traces, document)
        return await self._write("ingest_traces", lambda c: store_spans(with_many(c), spans))

    # -- the idle worker's parked claim: no write while nothing can be claimed (see .idle) -----
    #: An idle parked claim sleeps until a NOTIFY, a due time or its end (:class:`~.idle.IdleLook`):
    #: a long park costs the rail nothing, so idle workers park from half their back-off's
    #: ceiling (docs/benchmarks/pickup.md).
    quiet_parks = True

    async def parked_claim(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        wait_ms: int,
        *,
        concurrency: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """The rail's parked claim (:meth:`Rail.parked_claim`), waiting without writing while
        nothing can be claimed and the wake-up listener is up (:class:`~.idle.IdleLook`)."""
        key = check_parked(idempotency_key, wait_ms)

        def park_on(wait_s: float, recorded: int | None) -> Awaitable[list[Lease]]:
            return self._park_claim(
                key, agent_id, agent_role, lease_ttl_ms, n, wait_s, concurrency, recorded=recorded
            )

        stand = self._stand(key, agent_id, agent_role, lease_ttl_ms, n, concurrency)
        return await self._idle_look.park(key, agent_id, agent_role, wait_ms / 1000, park_on, stand)

    def _stand(
        self,
        key: str,
        agent: str,
        role: str,
        ttl_ms: int,
        n: int,
        concurrency: Mapping[str, object] | None,
    ) -> Stand | None:
        """The standing claim of a parked claim's first attempt (see .standing): a claim the
        one-statement claim takes (no limits), with the claim_many's fingerprint."""
        limits = per_state_of(dict(concurrency) if concurrency is not None else None)
        secret = self._rail_key
        if secret is None or not self._plain_claim(agent, role, ttl_ms, n, limits):
            return None
        first = attempt_key(key, 0)
        try:
            fp = fingerprint([agent, role, ttl_ms, n, limits])
        except TrackerError:
            return None
        return stand_of(first, agent, role, ttl_ms, n, fp, secret, int(self._clock()))

    async def cancel_parked_claim(self, *, idempotency_key: str | None = None) -> ParkedCancelled:
        """Stop the parked claim of the key, waiting here or claiming (see
        :meth:`Rail.cancel_parked_claim`); what a create leased for its standing claim is
        given back too."""
        released = await self._idle_look.cancel(check_parked(idempotency_key, 0))
        cancelled = await super().cancel_parked_claim(idempotency_key=idempotency_key)
        return ParkedCancelled(released=cancelled.released + released)

    async def _create(self, where: str, create: Callable[[Ctx], _R], count: int) -> _R:
        """The rail's create, and in its write the standing claims of its tasks' roles
        claiming (see .standing)."""
        grants = self._standing.channel is not None
        return await super()._create(where, offering(create, grants), count)

    # -- the claim: one statement (see .claims) -------------------------------------------------
    async def claim(
        self,
        agent_id: str,
        role: str,
        lease_ttl_ms: int,
        *,
        per_state: Mapping[str, int] | None = None,
        idempotency_key: str | None = None,
    ) -> Lease | None:
        """Claim the best eligible task of ``role``: a lease claimed ahead for the agent when
        one is kept (:meth:`_claim_kept`), else one statement (see :mod:`.claims`)."""
        limits = dict(per_state or {})
        args = [agent_id, role, lease_ttl_ms, limits]
        kept = await self._claim_kept(agent_id, role, lease_ttl_ms, limits, idempotency_key, args)
        if kept is not None:
            return kept[0] if kept else None
        fast = await self._one_trip_claim(
            "claim", agent_id, role, lease_ttl_ms, 1, limits, idempotency_key, args
        )
        if fast is not None:  # one round trip (see .claims)
            self._remember(fast)
            if not fast:
                await self._engine.waiters.claimed_short()
            return fast[0] if fast else None

        def op(c: Ctx) -> Lease | None:
            return idempotent(
                c,
                idempotency_key,
                "claim",
                [agent_id, role, lease_ttl_ms, limits],
                lambda: claims.claim(c, agent_id, role, lease_ttl_ms, limits, idempotency_key),
                lambda lease: (
                    {"lease_id": lease.lease_id, "run_id": lease.run_id} if lease else None
                ),
                lambda rec: reissue(c, rec["lease_id"], rec["run_id"], idempotency_key),
            )

        lease = await self._write("claim", op)
        if lease is not None:
            self._remember([lease])  # its transition can take one round trip (see the module)
        else:
            await self._engine.waiters.claimed_short()
        return lease

    async def _claim_kept(
        self,
        agent_id: str,
        role: str,
        lease_ttl_ms: int,
        limits: Mapping[str, object],
        key: str | None,
        args: list[Any],
    ) -> list[Lease] | None:
        """A ``claim``'s answer from the leases claimed ahead for the agent (a worker with one
        slot free claims one lease so, between the batches its reports claim ahead for: it
        takes a kept one as a ``claim_many`` of one would, with no statement), or None when
        the claim goes to the rail. A replay of a key answered so answers the same lease while
        it is live, none after (``[]``), or ``Conflict`` for other arguments, as the rail's
        record would; a key the rail answered is the rail's to answer again."""
        ahead = self._ahead
        mark = None if key is None else f"claim\x00{key}"  # the rail keys per operation too
        earlier = ahead.replayed(mark)
        if earlier is not None:
            return await self._replay_kept(key, args, *earlier, op="claim")
        if (
            ahead.seen(mark)
            or not ahead.holds(agent_id, role, lease_ttl_ms)
            or not self._plain_claim(agent_id, role, lease_ttl_ms, 1, limits)
        ):
            ahead.sent(mark)  # to the rail: so is a replay of it
            return None
        got, _ = await ahead.take_waiting(1, self._built)
        await self._give_back_unwanted()
        if not got:
            ahead.sent(mark)
            return None
        ahead.answered(mark, fingerprint(args), got)
        return got

    async def claim_many(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        *,
        concurrency: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """Up to ``n`` leases of ``agent_role`` in one write (empty: no work); a replay with
        the key answers the same leases (the same tokens; one gone since is left out)."""
        limits = per_state_of(dict(concurrency) if concurrency is not None else None)
        args = [agent_id, agent_role, lease_ttl_ms, n, limits]
        ahead = self._ahead
        earlier = ahead.replayed(idempotency_key)
        if earlier is not None:
            return await self._replay_kept(idempotency_key, args, *earlier)
        got: list[Lease] = []
        if (
            not ahead.seen(idempotency_key)  # a replay is answered as the first call was
            and self._plain_claim(agent_id, agent_role, lease_ttl_ms, n, limits)
            and ahead.asked(agent_id, agent_role, lease_ttl_ms, n)
        ):
            # leases claimed ahead with this agent's last reports (see .ahead)
            await ahead.replay_lost(
                lambda key, k: self._claim_many_now(
                    agent_id, agent_role, lease_ttl_ms, k, {}, key,
                    [agent_id, agent_role, lease_ttl_ms, k, {}],
                )
            )  # fmt: skip
            got, done = await ahead.take_waiting(n, self._built)
            await self._give_back_unwanted()
            if got:
                ahead.answered(idempotency_key, fingerprint(args), got)
            if done:
                # all asked for, or the claim waited for found the role drained just now
                if len(got) < n:
                    await self._engine.waiters.claimed_short()
                return got
        ahead.sent(idempotency_key)
        await self._give_back_unwanted()  # kept leases no longer wanted: claimable again
        try:
            found = await self._claim_many_now(
                agent_id, agent_role, lease_ttl_ms, n - len(got), limits, idempotency_key, args
            )
        except BaseException:
            ahead.give_back(got)
            raise
        leases = got + found
        if got and found:
            ahead.answered(idempotency_key, fingerprint(args), leases)
        if len(leases) < n:
            await self._engine.waiters.claimed_short()
        return leases

    @staticmethod
    def _plain_claim(
        agent: Any, role: Any, ttl_ms: Any, n: Any, limits: Mapping[str, object]
    ) -> bool:
        """Whether a claim may skip the embedded-path claim (answered from leases claimed
        ahead, or in one round trip): its arguments are good (a bad one is refused by the
        embedded-path claim, as before), it has no limits and no ``task_claimed`` line is
        written (:func:`~tracker_client.rules.common.will_log`)."""
        if limits or will_log("task_claimed"):
            return False
        if not (isinstance(agent, str) and agent and isinstance(role, str) and role):
            return False
        try:
            check_ttl(ttl_ms)
            check_n(n)
        except TrackerError:
            return False
        return True

    async def _claim_many_now(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        limits: dict[str, int],
        idempotency_key: str | None,
        args: list[Any],
    ) -> list[Lease]:
        """``claim_many``'s write: one statement where it can (see :mod:`.claims`)."""
        fast = await self._one_trip_claim(
            "claim_many", agent_id, agent_role, lease_ttl_ms, n, limits, idempotency_key, args
        )
        if fast is not None:
            self._remember(fast)
            return fast

        def op(c: Ctx) -> list[Lease]:
            return keyed_claim_many(
                c, claim_many, idempotency_key, agent_id, agent_role, lease_ttl_ms, n, limits
            )

        leases = await self._write("claim_many", op)
        self._remember(leases)  # their transitions can take one round trip (see the module)
        return leases

    async def _built(self, kept: list[Kept]) -> list[Lease]:
        """The ``Lease`` s of kept leases (see :class:`.ahead.Granted`); an unreadable row is
        refused alone, as a claim refuses it."""
        out: list[Lease] = []
        ctx: Ctx | None = None
        for item in kept:
            if not isinstance(item, Granted):
                out.append(item)
                continue
            built = lease_of_row(
                item.row, item.now, item.run_id, item.lease_id, item.token, item.agent, item.role
            )
            if built is not None:
                out.append(built)
                continue
            if ctx is None or ctx.now != item.now:
                ctx = Ctx(
                    cast("sqlite3.Connection", None),
                    item.now,
                    self._opts,
                    self._pipelines,
                    STATEMENTS,
                )
            lease = await self._handed_out(
                item.row, ctx, item.run_id, item.lease_id, item.token, item.agent, item.role
            )
            if lease is not None:
                out.append(lease)
        self._remember(out)
        return out

    async def _replay_kept(
        self,
        key: str | None,
        args: list[Any],
        fp: str,
        leases: list[Lease],
        op: str = "claim_many",
    ) -> list[Lease]:
        """A ``claim_many`` (or ``op``) replayed under a key first answered with leases claimed
        ahead: the same leases, those still live (one read), or ``Conflict`` for other
        arguments, as the rail's record answers (:mod:`.ahead`)."""
        if fingerprint(args) != fp:
            raise Conflict(
                f"idempotency key {key!r} was already used for a different {op} request",
                code="idempotency_conflict",
            )
        runs = [lease.run_id for lease in leases]

        def live(c: Ctx) -> set[str]:
            return {str(row[0]) for row in c.all("claims.live_runs", (runs, c.now))}

        held = await self._read("claim_many", live)
        return [lease for lease in leases if lease.run_id in held]

    async def _give_back_unwanted(self) -> None:
        """Withdraw the leases claimed ahead that no ``claim_many`` took (see :mod:`.ahead`)."""
        await self._ahead.release_unwanted(self._withdraw)

    async def _withdraw(self, lease: LeaseHandle, reason: str) -> bool:
        """Give back a lease claimed ahead that no claim took (``reason``: why, for the
        interface :meth:`ClaimAhead.release_unwanted` calls): withdrawn (:meth:`Rail.withdraw`),
        not released, so no executor sees attempt 2 of a task whose attempt 1 never ran, as on
        the embedded rail. False: the lease had moved on (lapsed and swept, say)."""
        return await self.withdraw(lease)

    async def release(
        self,
        lease: LeaseRef,
        reason: str = "worker_shutdown",
        *,
        idempotency_key: str | None = None,
    ) -> ReleaseResult:
        """Give the lease's task back (:meth:`Rail.release`); the agent's reports claim
        nothing ahead until it claims again (a stopping worker's reports would lease the
        tasks it is giving back)."""
        self._ahead.gave_back()
        return await super().release(lease, reason, idempotency_key=idempotency_key)

    async def aclose(self) -> None:
        """Release the leases claimed ahead (see :mod:`.ahead`), then close the engine."""
        self._ahead.close()
        await self._give_back_unwanted()
        await super().aclose()

    async def _one_trip_claim(
        self,
        op: str,
        agent_id: str,
        role: str,
        lease_ttl_ms: int,
        n: int,
        limits: Mapping[str, object],
        key: str | None,
        args: list[Any],
    ) -> list[Lease] | None:
        """Up to ``n`` leases through ``bw_claim`` (schema 7) in one round trip, or None when
        the embedded-path claim must run (it answers what this one leaves: bad arguments, a
        replayed key, housekeeping due, a rate limit, ``per_state`` limits, INFO logging)."""
        if not self._plain_claim(agent_id, role, lease_ttl_ms, n, limits):
            return None
        if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
            return None
        try:
            fp = None if key is None else fingerprint(args)
        except TrackerError:
            return None
        # A parked claim's standing claim: its ids, in the statement that reads what a
        # create claimed with them (see .standing).
        ahead = self._standing.ids(key, n) if op == "claim_many" else None
        built = await self._claim_params(op, agent_id, role, lease_ttl_ms, n, key, fp, ahead)
        now = built[2]
        if ahead is None:
            rows = await self._engine.pairs.claim(CLAIM_CALL, built[0], op)
        else:
            rows = self._standing.granted_rows(key)  # sent by the create's NOTIFY
            if rows is None:
                rows = await self._engine.db.one_call(STAND_CALL, built[0], op)
            if rows:  # granted by a create, maybe: its runs started at the create's time
                now = int(rows[0]["lease_expires_at_ms"]) - int(rows[0]["lease_ttl_ms"])
        if rows is None:
            return None
        return await self._leases_of(rows, built[1], now, agent_id, role)

    async def _claim_params(
        self,
        op: str,
        agent_id: str,
        role: str,
        lease_ttl_ms: int,
        n: int,
        key: str | None,
        fp: str | None,
        ahead: list[tuple[str, str, str]] | None = None,
    ) -> tuple[list[Any], list[tuple[str, str, str]], int]:
        """``bw_claim_tx``'s parameters for ``n`` leases (checked arguments), the ids they
        carry (``ahead``: made already, keyed) and the claim's ``now``."""
        now = int(self._clock())
        # run ids lead with the time (docs/benchmarks/retention.md)
        ids = ahead or fresh_ids_many(now, n, random_tokens=key is None)
        if key is not None and ahead is None:
            secret = self._rail_key
            if secret is None:
                secret = self._rail_key = await self._write("claim", rail_key)
            tokens = keyed_tokens(secret, [lid for _, lid, _ in ids], key)
            ids = [(r, lid, token) for (r, lid, _), token in zip(ids, tokens, strict=True)]
        params = [
            *self._engine.wake_args(notify=op not in QUIET_WRITES, follow=op not in FOLLOW_QUIET),
            op,
            role,
            agent_id,
            now,
            lease_ttl_ms,
            array_literal([i[0] for i in ids]),
            array_literal([i[1] for i in ids]),
            array_literal([token_hash(i[2]) for i in ids]),
            key,
            fp,
        ]
        return params, ids, now

    async def _leases_of(
        self, rows: list[Any], ids: list[tuple[str, str, str]], now: int, agent_id: str, role: str
    ) -> list[Lease] | None:
        """The leases of the rows ``bw_claim`` leased (None: every row was unreadable)."""
        self._changes.wake_followers()
        by_run = {run_id: (lease_id, token) for run_id, lease_id, token in ids}
        leases: list[Lease] = []
        # the leases' view: no connection (what needs one is written through _write)
        ctx = Ctx(cast("sqlite3.Connection", None), now, self._opts, self._pipelines, STATEMENTS)
        for row in rows:
            run_id = str(row["lease_run_id"])
            lease_id, token = by_run[run_id]
            lease = lease_of_row(row, now, run_id, lease_id, token, agent_id, role)
            if lease is None:
                lease = await self._handed_out(row, ctx, run_id, lease_id, token, agent_id, role)
            if lease is not None:
                leases.append(lease)
        if rows and not leases:
            return None  # every row was unreadable (refused): the embedded claim goes on
        return leases

    async def _handed_out(
        self, row: Row, ctx: Ctx, run_id: str, lease_id: str, token: str, agent: str, role: str
    ) -> Lease | None:
        """The lease of a row ``bw_claim`` leased; a row that says it has a checkpoint has it
        read, and an unreadable row is refused alone, the embedded way (dead-lettered
        ``corrupt_row``; None)."""
        try:
            task = task_from_row(cast(Any, row), strict=True)
        except CorruptRow as exc:
            error = str(exc)
            await self._write("claim", lambda c: refuse_leased(c, row, run_id, error))
            return None
        if row["checkpointed"]:
            return await self._write(
                "claim", lambda c: lease_of(c, row, task, run_id, lease_id, token, agent, role)
            )
        return lease_of(ctx, row, task, run_id, lease_id, token, agent, role)

    # -- the transition in one round trip (see the module docstring) ----------------------------
    def _remember(self, leases: Sequence[Lease]) -> None:
        """Note the pipeline and stage of leases handed out (see the module docstring)."""
        known = self._leased
        for lease in leases:
            task = lease.task  # each field read once: a model field is read through a hook
            if task.budgets:  # budgets of its own: the rail's transition checks them
                continue
            if len(known) >= REMEMBERED:
                known.pop(next(iter(known)))
            known[lease.run.id] = (task.pipeline_id, task.stage)

    async def transition(
        self,
        lease: LeaseRef,
        trigger: str,
        *,
        expected_stage: str | None = None,
        expected_task_version: int | None = None,
        instructions: str | None = None,
        usage: Any = None,
        wait_for: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> TransitionResult:
        """Complete the run and move the task (one round trip when the move is known here)."""
        done = await self._one_trip_transition(
            lease,
            trigger,
            expected_stage,
            expected_task_version,
            instructions,
            usage,
            wait_for,
            idempotency_key,
        )
        if done is not None:
            return done
        moved: TransitionResult = await super().transition(
            lease,
            trigger,
            expected_stage=expected_stage,
            expected_task_version=expected_task_version,
            instructions=instructions,
            usage=usage,
            wait_for=wait_for,
            idempotency_key=idempotency_key,
        )
        return moved

    async def _one_trip_transition(
        self,
        lease: LeaseRef,
        trigger: Any,
        expected_stage: str | None,
        expected_task_version: int | None,
        instructions: str | None,
        usage: Any,
        wait_for: Sequence[str],
        key: str | None,
    ) -> TransitionResult | None:
        digest = token_hash(lease.lease_token.get_secret_value())
        args = [
            lease.run_id,
            digest,
            trigger,
            expected_stage,
            expected_task_version,
            instructions,
            usage,
        ]
        planned = self._plan_move(
            lease,
            trigger,
            expected_stage,
            expected_task_version,
            instructions,
            usage,
            wait_for,
            key,
            lambda result: (
                args,
                json.dumps(result.model_dump(mode="json"), separators=(",", ":")),
            ),
            digest,
        )
        if planned is None:
            return None
        params, result = planned
        params["now"] = int(self._clock())
        try:
            found = await self._engine.db.one_call(
                _CALL, [*self._engine.wake_args(), *(params[f] for f in MOVE_FIELDS)], "transition"
            )
        finally:
            self._changes.notify()  # committed or not: a waiter looks again, as after any write
            self._changes.wake_followers()
        return result if found and found[0][0] else None

    def _plan_move(
        self,
        lease: LeaseRef,
        trigger: Any,
        expected_stage: Any,
        expected_task_version: Any,
        instructions: Any,
        usage: Any,
        wait_for: Any,
        key: Any,
        record: Callable[[TransitionResult], tuple[Any, str]],
        digest: str,
    ) -> tuple[dict[str, Any], TransitionResult] | None:
        """The parameters of ``bw_transition``/``bw_move`` (all but ``now``, the caller's:
        a batch's items share the call's) for a plain transition of a lease
        this instance handed out, and its answer; None when the embedded path must answer
        (see the module docstring). ``record(result)``: the idempotency fingerprint's
        arguments and the recorded answer's JSON text; ``digest``: the lease token's."""
        known = self._leased
        where = known.pop(lease.run_id, None)
        if where is None or wait_for or will_log("task_finished"):
            return None
        if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
            return None  # the embedded path refuses it, naming it
        if not (expected_stage is None or isinstance(expected_stage, str)):
            return None
        if not (instructions is None or isinstance(instructions, str)):
            return None
        version = expected_task_version
        if not (version is None or (isinstance(version, int) and not isinstance(version, bool))):
            return None
        pid, stage = where
        cache: PipelineCache = self._pipelines
        pipeline = cache.cached(pid)  # parsed at the claim; never fetched here
        if pipeline is None or not isinstance(trigger, str):
            return None
        if expected_stage is not None and expected_stage != stage:
            return None
        move = self._moves.get((pid, stage, trigger)) if instructions is None else None
        if move is None or move[0] is not pipeline:
            move = self._plan_of(pipeline, pid, stage, trigger, instructions)
            if move is None:
                return None
        _, to, role, terminal, event, result, no_check = move
        if not (no_check if usage is None else budgets.one_trip_ok(pipeline, stage, to, usage)):
            return None  # a budget to check (docs/operate/budgets.md): the rail's transition
        try:
            usage_text = None if usage is None else dumps(usage, "usage", max_bytes=MIB)
            args, answer = record(result)
            fp = None if key is None else _fingerprint(args, self._texts)
        except TrackerError:
            return None  # the embedded path refuses it, in its own order
        params = {
            "run": lease.run_id,
            "token": digest,
            # The version the move was worked out from: the call writes nothing unless the
            # task and its pipeline are at it (bw_version_is; docs/operate/pipelines.md).
            "pipeline": f"{pid}@{pipeline.version}",
            "stage": stage,
            "version": version,
            "to": to,
            "role": role,
            "terminal": terminal,
            "usage": usage_text,
            "event": event,
            "key": key,
            "fp": fp,
            "result": answer,
        }
        return params, result

    def _plan_of(
        self, pipeline: Any, pid: str, stage: str, trigger: str, instructions: str | None
    ) -> _Move | None:
        """The move ``trigger`` makes from ``stage`` (see :data:`_Move`); None when the
        pipeline has no such move or the event cannot be stored. Kept per (pipeline,
        stage, trigger) for runs reporting no instructions of their own (nearly all: the
        event is then the same for every run making the move), while the pipeline is the
        cached one it was worked out from."""
        move = pipeline.find(stage, trigger)
        if move is None:
            return None
        to = move.to_state
        text = instructions if instructions is not None else (move.instructions or "")
        try:
            event = dumps(
                {"trigger": trigger, "from": stage, "to": to, "instructions": text}, "event data"
            )
        except TrackerError:
            return None  # the embedded path refuses it, in its own order
        result = TransitionResult(previous_stage=stage, new_stage=to, trigger=trigger)
        planned = (
            pipeline,
            to,
            pipeline.role_of(to),
            int(pipeline.is_terminal(to)),
            event,
            result,
            budgets.one_trip_ok(pipeline, stage, to, None),
        )
        if instructions is None:
            moves = self._moves
            if len(moves) >= REMEMBERED:
                moves.clear()
            moves[(pid, stage, trigger)] = planned
        return planned

    # -- finish_many in one round trip (see the module docstring) -------------------------------
    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """Write each item as ``finish`` would; per item its ``FinishResult`` or the error
        that refused it (that item alone wrote nothing), in the items' order."""
        check_items(items)
        out: list[FinishManyOutcome | None] = [None] * len(items)
        planned: list[tuple[int, dict[str, Any], FinishResult]] = []
        for i, item in enumerate(items):
            plan = self._plan_item(item)
            if plan is not None:
                planned.append((i, *plan))
        if planned:
            done = await self._one_trip_many([p for _, p, _ in planned])
            for (i, _, result), ok in zip(planned, done, strict=True):
                if ok:
                    out[i] = result
        rest = [i for i, found in enumerate(out) if found is None]
        if rest:
            embedded: list[FinishManyOutcome] = await super().finish_many([items[i] for i in rest])
            for i, outcome in zip(rest, embedded, strict=True):
                out[i] = outcome
        return [o for o in out if o is not None]

    def _plan_item(self, item: FinishItem) -> tuple[dict[str, Any], FinishResult] | None:
        """``bw_move``'s parameters and the answer of a plain-transition item, or None."""
        moved = item.transition
        if item.events or moved is None or item.fail is not None:
            return None
        if type(moved) is dict and type(item.events) is tuple:  # the worker's: no events
            plain: list[dict[str, Any]] = []
            body: dict[str, Any] | None = dict(moved)  # what prepare makes of them
        else:
            try:
                plain, body, _ = prepare(item.events, moved, None)
            except TrackerError:
                return None
        assert body is not None
        if not _PLAIN_FIELDS.issuperset(body):
            return None
        digest = token_hash(item.lease.lease_token.get_secret_value())
        answers: list[FinishResult] = []

        def record(result: TransitionResult) -> tuple[Any, str]:
            args = [item.lease.run_id, digest, plain, body, None]
            # the same answer for every run making the move (a frozen model, as its
            # TransitionResult is): made, and its JSON text, once
            found = self._answers.get(id(result))
            if found is None or found[0] is not result:
                if len(self._answers) >= REMEMBERED:
                    self._answers.clear()
                done = FinishResult(event_ids=[], transition=result)
                text = json.dumps(done.model_dump(mode="json"), separators=(",", ":"))
                found = self._answers[id(result)] = (result, done, text)
            answers.append(found[1])
            return args, found[2]

        planned = self._plan_move(
            item.lease,
            body.get("trigger"),
            body.get("expected_stage"),
            body.get("expected_task_version"),
            body.get("instructions"),
            body.get("usage"),
            body.get("wait_for") or (),
            item.idempotency_key,
            record,
            digest,
        )
        if planned is None or not answers:
            return None
        return planned[0], answers[0]

    async def _one_trip_many(self, params: list[dict[str, Any]]) -> list[bool]:
        """``bw_finish_many_tx`` over the planned items: per item whether it was written (all
        False when the call declined: nothing written). While this instance's worker is busy,
        its next batch's claim rides along (:mod:`.ahead`)."""
        text = _items_text(params, self._heads)  # bw_move's fields but the batch's now
        call = [*self._engine.wake_args(), int(self._clock()), text]
        ahead = self._ahead
        try:
            wanted = ahead.wanted()
            if wanted is None and ahead.busy():  # enough kept: no claim will come to pair
                found = await self._engine.db.one_call(_MANY_CALL, call, "finish_many")
            elif wanted is None:
                found = await self._engine.pairs.finish(_MANY_CALL, call, "finish_many")
            else:
                found = await self._finish_and_claim_ahead(call, *wanted)
        finally:
            self._changes.notify()  # committed or not: a waiter looks again, as after any write
            self._changes.wake_followers()
        if ahead.expire():  # kept too long while the worker reported: claimable again
            await self._give_back_unwanted()
        done = found[0][0] if found else None
        if not isinstance(done, list) or len(done) != len(params):
            return [False] * len(params)
        return [bool(ok) for ok in done]

    async def _finish_and_claim_ahead(
        self, call: list[Any], agent: str, role: str, ttl_ms: int, n: int
    ) -> list[Any] | None:
        """``bw_finish_many_tx``'s answer, its statement sent with a claim of ``n`` leases
        kept for the agent's next ``claim_many`` (:mod:`.ahead`): one statement, one commit.
        The claim is keyed: an answer lost is replayed by the next ``claim_many``. (A claim
        on a second connection beside it measured slower on 2 cores: both statements ~3 ms
        instead of one of ~2.4, and twice the commits.)"""
        ahead = self._ahead
        ahead.started()
        key = f"claim-ahead-{self._engine.instance}-{ahead.sent_n}"
        # shielded from the send to the leases kept: a lease granted is never dropped
        with anyio.CancelScope(shield=True):
            found = await self._send_with_claim_ahead(call, agent, role, ttl_ms, n, key)
        return found

    async def _send_with_claim_ahead(
        self, call: list[Any], agent: str, role: str, ttl_ms: int, n: int, key: str
    ) -> list[Any] | None:
        """The statement of :meth:`_finish_and_claim_ahead`, its leases kept."""
        ahead = self._ahead
        granted: list[Kept] = []
        try:
            fp = fingerprint([agent, role, ttl_ms, n, {}])
            params, ids, now = await self._claim_params(
                "claim_many", agent, role, ttl_ms, n, key, fp
            )
            try:
                found, rows = await self._engine.pairs.together(
                    _MANY_CALL, call, params, "finish_many"
                )
            except TrackerUnavailable:
                ahead.lost(key, n)
                raise
            if rows:  # kept as they came: each Lease is built when handed out
                self._changes.wake_followers()
                by_run = {run_id: (lease_id, token) for run_id, lease_id, token in ids}
                for row in rows:
                    run_id = str(row["lease_run_id"])
                    lease_id, token = by_run[run_id]
                    granted.append(Granted(row, run_id, lease_id, token, now, agent, role))
        finally:
            ahead.landed((agent, role, ttl_ms), n, granted)
        return found


def _not_here_yet(name: str, extension: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: PostgresTracker, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(f"the PostgreSQL rail has no {extension} extension yet ({name})")

    method.__name__ = name
    method.__doc__ = f"``Unsupported``: the {extension} extension is not on this rail yet."
    return method


# The operations of the missing extensions answer Unsupported however they are reached (a
# served rail's routes call the method by name, not through ``call``): 501 over HTTP. The
# contract's table is read only then: a worker's start-up imports it no more (~1.8 ms of a
# PostgreSQL worker's start, which CPU per task counts; issue 31).
if MISSING_EXTENSIONS:
    from tracker_client.contract.operations import OPERATIONS

    for _op in OPERATIONS:
        if _op.extension in MISSING_EXTENSIONS:
            setattr(PostgresTracker, _op.name, _not_here_yet(_op.name, _op.extension))
