"""Who waits for what a lease's end may bring: the ``waiters`` rows (schema 10).

Every waking write sends ``pg_notify`` at its commit (see :mod:`.wake`), and each NOTIFY wakes
every listening backend of every host and its listener thread. The hot path's lease-ending
moves (a plain transition, ``finish_many``'s plain transitions: schema 9's ``bw_transition_tx``
and ``bw_finish_many_tx``) are most of a busy rail's writes, and what they may bring (a task in
a new stage, dependents or a concurrency key or a stage slot freed, a task finished) only
matters to an instance that is idle: a claim that came back short, or a caller of ``wait``.
They cannot revoke another lease, so the workers' standing watch (which heartbeats in-flight
leases on a wake-up, for cancels) does not need them. So they NOTIFY only while some instance
has a live row in ``waiters``: written when a claim of this instance leases fewer than asked
(:meth:`WaitersRow.claimed_short`) and by ``wait`` (:meth:`WaitersRow.wait_interest`), alive
a while on the server's clock. Every other write notifies as before.

A move racing the row's first commit (its check before the row existed, its commit after the
claim's look) is covered at once: a freshly written row wakes this instance's waiters in
process, so the idle claim loop claims again after it. A ``wait`` sleeps at most
:data:`FRESH_TICK_S` after writing its row. This room writes only the ``waiters`` table.

An idle worker's parked claim (:class:`IdleLook`) waits without writing while nothing can be
claimed: one read (``wait.idle_look``) says whether a claim could lease now and when time alone
may make work claimable; while the listener is up and the row was live, it then sleeps until a
NOTIFY (or a write of this instance), that time, :data:`LOOK_TICK_S` or its deadline, and only
a wake-up or a due time sends the keyed claim. Before it, every idle round's probe was two
keyed claims (each a durable write) and two reads (docs/benchmarks/pickup.md).
While it sleeps it *stands* (:mod:`.standing`): the create that brings its work claims for it
in the create's own write, and the keyed claim the NOTIFY sends then only reads the leases.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from tracker_client.errors import TrackerError
from tracker_client.models import Lease
from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS, PgConn
from tracker_client.postgres.standing import Stand, StandingClaims
from tracker_client.rules.engine import Changes
from tracker_client.rules.parked import attempt_key

if TYPE_CHECKING:
    from tracker_client.postgres.engine import PgEngine

__all__ = [
    "FRESH_TICK_S",
    "IDLE_ROW_S",
    "INTEREST_MARGIN_S",
    "LOOK_TICK_S",
    "IdleLook",
    "WaitersRow",
    "look_params",
]

#: A waiting instance's row outlives its longest wait by this much (seconds).
INTEREST_MARGIN_S = 30
#: How long a short claim keeps the instance's row alive (an idle claim loop claims again well
#: within it, refreshing it); a row with less than half of it left is refreshed.
IDLE_ROW_S = 30
#: The longest first sleep after the row was (re)written (a write racing its commit).
FRESH_TICK_S = 1.0

#: The longest an idle parked claim sleeps without looking again: a writer that sends no NOTIFY
#: (none of this project's), or a lease another host's claim took since the last look (claims
#: are quiet) lapsing before the look's due time.
LOOK_TICK_S = 2.0

#: The idle look (postgres/sql/wait.sql) and the order of its positional parameters.
_LOOK = STATEMENTS["wait.idle_look"]
_LOOK_ORDER = ("key", "role", "now", "agent", *("now",) * 4, "role", "role", *("now",) * 3)

# psycopg's own placeholders, on the raw connection (no domain rule is involved).
_INTEREST = (
    "INSERT INTO waiters (instance, expires_at) "
    "VALUES (%s, clock_timestamp() + make_interval(secs => %s)) "
    "ON CONFLICT (instance) DO UPDATE SET "
    "expires_at = GREATEST(waiters.expires_at, EXCLUDED.expires_at)"
)
_FORGET_STALE = "DELETE FROM waiters WHERE expires_at < clock_timestamp() - interval '1 hour'"


class WaitersRow:
    """This instance's ``waiters`` row, kept while it has waiters (part of the engine)."""

    def __init__(self, db: Database, instance: str, changes: Changes) -> None:
        self._db = db
        self._instance = instance
        self._changes = changes
        #: ``anyio.current_time()`` until which this instance's ``waiters`` row is known alive.
        self._waiting_until = 0.0

    async def claimed_short(self) -> None:
        """A claim leased fewer than asked: keep the row alive; a fresh row wakes this
        instance's waiters (the claim loop claims again, after the row is seen)."""
        if self._waiting_until >= anyio.current_time() + IDLE_ROW_S / 2:
            return
        # The claim has committed: its leases are answered whatever happens to the row (a
        # row not written costs an idle loop its wake-up for the moves, never a lease).
        fresh = False
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            fresh = await self.wait_interest(IDLE_ROW_S - INTEREST_MARGIN_S)
        if fresh:
            self._changes.notify()

    async def wait_interest(self, wait_s: float) -> bool:
        """Keep this instance's row alive past a wait of ``wait_s``; True when it was written
        now (the caller's first sleep is then at most :data:`FRESH_TICK_S`)."""
        now = anyio.current_time()
        if self._waiting_until >= now + wait_s + 1:
            return False
        lasts = int(wait_s) + INTEREST_MARGIN_S
        fresh = self._waiting_until <= now  # the row may have lapsed: writes may have skipped

        def register(conn: PgConn) -> None:
            conn.raw.execute(_FORGET_STALE.encode())
            conn.raw.execute(_INTEREST.encode(), (self._instance, lasts))

        await self._db.run(register, "wait_interest", write=True, shared=True)
        self._waiting_until = now + lasts
        return fresh

    async def aclose(self) -> None:
        """Stop waiting: this instance's row goes (best effort: it expires anyway)."""
        if self._waiting_until:
            self._waiting_until = 0.0
            with contextlib.suppress(Exception):
                await self._db.run(
                    lambda conn: conn.raw.execute(
                        b"DELETE FROM waiters WHERE instance = %s", (self._instance,)
                    ),
                    "wait_interest",
                    write=True,
                    shared=True,
                )


def look_params(key: str, role: str, agent: str, now_ms: int) -> list[Any]:
    """``wait.idle_look``'s parameters: the parked claim's first attempt's key, the role, the
    agent and the rail's time, where each appears."""
    values = {"key": key, "role": role, "agent": agent, "now": now_ms}
    return [values[name] for name in _LOOK_ORDER]


#: A parked claim sent on (the rail's: :meth:`~tracker_client.rules.rail.Rail._park_claim`):
#: how long it may still wait, and the attempts of its key recorded (None: it reads them).
ParkOn = Callable[[float, int | None], Awaitable[list[Lease]]]
#: Give one lease back (the rail's ``release``, no attempt counted).
GiveBack = Callable[[Lease], Awaitable[None]]


class IdleLook:
    """An idle parked claim's wait on PostgreSQL: no write while nothing can be claimed (see
    the module docstring; part of the tracker).

    Every path that makes work claimable either sends a NOTIFY at its commit (a create, a
    transition or finish while a ``waiters`` row is live, a fail, a release, a cancel, a
    requeue, a schedule's tick, a maintenance pass that reclaimed or dead-lettered), or is
    time: a delay or retry delay coming due, a lease lapsing, a deadline passing, a rate
    limit's tokens refilling. The look answers the first times of the former three and sends
    a rate-limited role on at once. A listener that is down, or a ``waiters`` row written just
    now, sends the claim on as before (the rail's parked claim: claims and ``wait_for_work``).
    """

    def __init__(
        self,
        engine: PgEngine,
        clock: Callable[[], int],
        ended: Callable[[str], bool],
        standing: StandingClaims | None = None,
        give_back: GiveBack | None = None,
    ) -> None:
        """``ended``: whether the rail's parked claims know the key as ended or cancelled
        (:meth:`~tracker_client.rules.parked.ParkedClaims.ended`); ``standing``: where a
        parked claim stands while it sleeps (:mod:`.standing`; None: it does not), and
        ``give_back`` what a create claimed for a parked claim that was stopped meanwhile."""
        self._engine = engine
        self._standing = standing
        self._give_back = give_back
        self._ended = ended
        self._db = engine.db
        self._changes = engine.changes
        self._clock = clock
        #: Parked claims waiting here, by key (:meth:`cancel` stops one).
        self._waiting: dict[str, _Waiting] = {}
        #: Looks sent and claims sent on after a wake-up or a due time (tests read them).
        self.looks = 0
        self.sent_on = 0
        #: The last look that found nothing claimable, while it still holds (:meth:`_held`).
        self._quiet: _QuietLook | None = None
        #: Looks a parked claim did without: the last one held (tests read it).
        self.looks_saved = 0
        #: Parked claims asleep now, waiting for a wake-up or a due time (tests wait on it).
        self.asleep = 0

    async def park(
        self,
        key: str,
        agent: str,
        role: str,
        wait_s: float,
        park_on: ParkOn,
        stand: Stand | None = None,
    ) -> list[Lease]:
        """Up to the parked claim's leases of ``role`` within ``wait_s``: empty when its
        deadline passed with nothing claimable, or it was cancelled; else what ``park_on``
        answers (a wake-up or a due time: one keyed claim, waiting no more). ``stand``: its
        standing claim while it sleeps (None: it does not stand)."""
        if self._ended(key):  # a retry, or its cancel overtook it: the rail answers at once
            return await park_on(0.0, None)
        deadline = anyio.current_time() + max(0.0, wait_s)
        stop = self._waiting[key] = _Waiting()
        if self._standing is None:
            stand = None
        try:
            while not stop.stopped:
                remaining = deadline - anyio.current_time()
                if not await self._engine.listening(max(0.0, remaining)):
                    if stop.stopped:  # cancelled while the listener started: no claim sent
                        break
                    stop.standing, stop.sent = False, True  # its first claim withdraws a row
                    return await park_on(max(0.0, deadline - anyio.current_time()), None)
                changes, engine = self._changes, self._engine
                # Before the look: a NOTIFY after its snapshot moves them.
                seen, afar = changes.seq, engine.woken_from_afar
                held = self._held(role, agent, seen, afar)
                looked_at = anyio.current_time()
                if held is not None:  # nothing came since the last look: it still answers
                    self.looks_saved += 1
                    recorded, claimable, due_ms = False, False, held.due_ms
                    looked_at = held.at
                else:
                    recorded, claimable, due_ms = await self._look(key, agent, role)
                    self._quiet = None
                    if not recorded and not claimable:
                        self._quiet = _QuietLook(role, agent, seen, afar, looked_at, due_ms)
                if stop.stopped:
                    break
                if recorded:  # a retry, or a create claimed for its stand: the rail replays it
                    stop.standing, stop.sent = False, True  # its claim withdraws the row
                    return await park_on(max(0.0, deadline - anyio.current_time()), None)
                if claimable or engine.woken_from_afar != afar:
                    return await self._send_on(park_on, stop)
                if stand is not None and not stop.standing:
                    assert self._standing is not None
                    stop.standing = True  # before the write: a stop meanwhile withdraws it
                    await self._standing.stand(stand)
                    if stop.stopped:
                        break
                now = anyio.current_time()
                until = min(deadline, looked_at + LOOK_TICK_S)
                if due_ms is not None:
                    until = min(until, now + max(0.0, (due_ms - self._clock()) / 1000))
                self.asleep += 1
                try:
                    woken = await self._sleep(seen, afar, until - now, stop)
                finally:
                    self.asleep -= 1
                if woken is _Woken.AFAR:
                    return await self._send_on(park_on, stop)
                if woken is _Woken.NOT and anyio.current_time() >= deadline:
                    break  # nothing came: the caller's next round looks again
                # A write of this instance (it may have made work: its task finished, say),
                # a due time or the tick: look again.
            if stand is not None and stop.standing and not stop.stopped:
                stop.standing = False
                if not await self._withdraw(stand):  # a create claimed for it meanwhile
                    stop.sent = True
                    return await park_on(0.0, None)
        finally:
            if self._waiting.get(key) is stop:
                del self._waiting[key]
            try:
                if stand is not None and stop.standing:  # stopped, or its caller cancelled
                    stop.standing = False
                    await self._stood_down(stand, park_on, stop)
            finally:
                if stand is not None and self._standing is not None:
                    self._standing.forget(stand)
                stop.ended.set()
        return []

    async def _withdraw(self, stand: Stand) -> bool:
        """Withdraw ``stand``'s row (shielded: it must go even for a cancelled caller); True
        when it was there, False when a create took it (see :mod:`.standing`)."""
        assert self._standing is not None
        withdrawn = False
        with anyio.CancelScope(shield=True):
            withdrawn = await self._standing.withdraw(stand)
        return withdrawn

    async def _stood_down(self, stand: Stand, park_on: ParkOn, stop: _Waiting) -> None:
        """A parked claim stopped (or cancelled) while it stood: its row withdrawn, or what a
        create leased for it taken through its key's record and given back (no attempt
        counted), so nothing stays leased to a claim nobody answers."""
        if await self._withdraw(stand):
            return
        with anyio.CancelScope(shield=True):
            leases = await park_on(0.0, None)
            for lease in leases:
                if self._give_back is not None:
                    with contextlib.suppress(TrackerError):  # gone already: nothing held
                        await self._give_back(lease)
                        stop.released += 1

    def _held(self, role: str, agent: str, seen: int, afar: int) -> _QuietLook | None:
        """The last look, when it still answers for a new parked claim of ``role``: it found
        nothing claimable for the same agent, no wake-up came since (a NOTIFY, a write of this
        instance), its due time has not come and it is younger than :data:`LOOK_TICK_S` (the
        bound on a lease another host's quiet claim took since, as for a sleep; the sleep
        after it ends by then). The parked claim's key is new here (one the rail knows as
        ended was answered before the look), so no claim of it is recorded: the look's first
        answer is known too. Each idle round's parked claim otherwise read the rail once
        (about five per pickup in the pickup bench, docs/benchmarks/pickup.md)."""
        quiet = self._quiet
        if quiet is None or (quiet.role, quiet.agent) != (role, agent):
            return None
        if (quiet.seen, quiet.afar) != (seen, afar):  # a wake-up came since
            return None
        if anyio.current_time() - quiet.at >= LOOK_TICK_S:
            return None
        if quiet.due_ms is not None and self._clock() >= quiet.due_ms:
            return None
        return quiet

    async def _send_on(self, park_on: ParkOn, stop: _Waiting) -> list[Lease]:
        """Work may have come: the parked claim's one keyed claim (its first attempt; the
        look read that none was recorded), answering at once. A standing claim's row is
        withdrawn by that claim itself, in the same statement (:data:`.standing.STAND_CALL`)."""
        self.sent_on += 1
        stop.standing, stop.sent = False, True
        return await park_on(0.0, 0)

    async def _look(self, key: str, agent: str, role: str) -> tuple[bool, bool, int | None]:
        """One read: (a claim of the key is recorded, a claim could lease now, the earliest
        time time alone may make work claimable or None)."""
        self.looks += 1
        params = look_params(attempt_key(key, 0), role, agent, int(self._clock()))
        rows = await self._db.one_call(_LOOK, params, "parked_claim")
        if rows is None:  # behind a PgBouncer: on a pooled connection
            rows = await self._db.run(
                lambda conn: conn.raw.execute(_LOOK.encode(), params).fetchall(),
                "parked_claim",
                write=False,
            )
        recorded, claimable, due = rows[0]
        return bool(recorded), bool(claimable), None if due is None else int(due)

    async def _sleep(self, seen: int, afar: int, limit_s: float, stop: _Waiting) -> _Woken:
        """Until a wake-up since ``seen`` (from another host since ``afar``: AFAR; a write of
        this instance: OWN), or ``limit_s`` passed or ``stop`` (NOT)."""
        changes = self._changes
        changes.waiters += 1
        try:
            event = changes.changed  # a wake-up from here on sets it
            if changes.seq == seen:
                with anyio.move_on_after(max(0.0, limit_s)) as stop.scope:
                    await event.wait()
            if stop.stopped or changes.seq == seen:
                return _Woken.NOT
            return _Woken.AFAR if self._engine.woken_from_afar != afar else _Woken.OWN
        finally:
            stop.scope = None
            changes.waiters -= 1

    async def cancel(self, key: str) -> int:
        """Stop the parked claim of ``key`` waiting here: it answers empty, nothing leased (a
        claim of ``key`` arriving after the cancel is answered by the rail's record of it).
        Returns once its standing claim is withdrawn, or what a create leased for it was
        given back (how many leases); a claim it already sent on is the rail's to cancel."""
        stop = self._waiting.pop(key, None)
        if stop is None:
            return 0
        stop.stopped = True
        if stop.scope is not None:
            stop.scope.cancel()
        if not stop.sent:
            await stop.ended.wait()
        return stop.released


@dataclass(frozen=True, slots=True)
class _QuietLook:
    """A look that found nothing claimable: for whom, the wake-up counts it saw, when it was
    taken (``anyio.current_time()``) and the earliest time time alone may make work
    claimable (the rail's clock, ms; None: none)."""

    role: str
    agent: str
    seen: int
    afar: int
    at: float
    due_ms: int | None


class _Woken(enum.Enum):
    """How an idle parked claim's sleep ended."""

    NOT = "not"  # its time, its deadline, or stopped
    AFAR = "afar"  # a NOTIFY of another host (or the listener lost): claim now
    OWN = "own"  # a write of this instance: look again


class _Waiting:
    """One parked claim waiting in :meth:`IdleLook.park`: stopped, its sleep's scope, whether
    it stands now (a row that must be withdrawn), whether its claim was sent on (the rail's
    parked claim has it), the leases it gave back, and its end."""

    __slots__ = ("ended", "released", "scope", "sent", "standing", "stopped")

    def __init__(self) -> None:
        self.stopped = False
        self.scope: anyio.CancelScope | None = None
        self.standing = False
        self.sent = False
        self.released = 0
        self.ended = anyio.Event()
