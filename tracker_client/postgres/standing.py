"""Standing claims (schema 21): an idle parked claim the create that brings its work claims for.

An idle worker's parked claim on PostgreSQL sleeps until a NOTIFY (:class:`~.idle.IdleLook`);
woken, it sent its keyed claim: a write with its own WAL flush and an idle backend waking, ~3
ms of a ~6 ms pickup (docs/benchmarks.md, "Pickup latency"). While it sleeps it now *stands*:
one row in ``standing_claims`` with its first attempt's idempotency key, role, agent, lease TTL,
the claim's fingerprint, and the run ids, lease ids and token digests it made ahead (the tokens
derive from the rail's key and the attempt's key, :mod:`tracker_client.rules.leasekeys`, so the
worker knows them and the row holds only their SHA-256). A create sends ``bw_hand_off`` with the
ids it inserted (:func:`offering`, in its own transaction and round trip): for the standing
claims of those tasks' roles, longest standing first, each taken once, it runs that claim,
``bw_claim`` under the attempt's key, in a subtransaction, so a claim refused or leasing nothing
is rolled back alone and the create goes on. The create's NOTIFY then wakes the worker, whose
claim under the key (``bw_stand_claim_tx``, :data:`STAND_CALL`) withdraws the row, finds the
key recorded and reads the leases: nothing written, no WAL flush on the pickup's path. Nothing
recorded (another role's task woke it, a create of an earlier schema, one that found the
holder gone) and the same statement claims, as the plain claim did, with the ids made ahead.

Nothing is stranded:

* a holder that died: it holds a session advisory lock on its wake-up listener's connection
  (:func:`~.wake.holder_of`); a create that can take that lock knows the holder is gone and
  deletes its row without claiming (a crash of the server empties the UNLOGGED table);
* a parked claim that ends without a wake-up (its wait is over, it is stopped or cancelled)
  withdraws its row (:meth:`StandingClaims.withdraw`); none left means a create claimed for
  it, and the leases are taken through the key's record (the rail's parked claim replays the
  attempt), returned to the caller or, stopped, given back;
* every grant is a claim under the attempt's key: recorded once (the row is locked and deleted
  by the create that takes it; a second claim of a recorded key is refused), so a retry under
  it answers the same leases with the same tokens.

The write of the row and its withdrawal touch only the UNLOGGED table: their commits wait for
no WAL flush, and neither is on the pickup's path. Lease tokens never travel in a NOTIFY.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS, PgConn
from tracker_client.postgres.wake import holder_of
from tracker_client.rules.claims import fresh_ids_many
from tracker_client.rules.common import Ctx
from tracker_client.rules.leasekeys import keyed_token
from tracker_client.rules.runs import token_hash

__all__ = ["STAND_CALL", "Stand", "StandingClaims", "offering", "stand_of"]

R = TypeVar("R")

#: A standing claim's own claim: ``bw_claim_tx``'s parameters and answer (schema 21).
STAND_CALL = STATEMENTS["standing.claim_tx"]

# psycopg's own placeholders, on the raw connection (no domain rule is involved).
_STAND = (
    b"INSERT INTO standing_claims (key, role, agent, ttl_ms, fingerprint, runs, leases, tokens,"
    b" holder_a, holder_b) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    b" ON CONFLICT (key) DO NOTHING"
)
_WITHDRAW = b"DELETE FROM standing_claims WHERE key = %s"


@dataclass(frozen=True, slots=True)
class Stand:
    """One parked claim's standing claim: its first attempt's key, what it claims, the
    claim's fingerprint and the ids it made ahead (run id, lease id, token; one per lease)."""

    key: str
    role: str
    agent: str
    ttl_ms: int
    fingerprint: str
    ids: list[tuple[str, str, str]]


class StandingClaims:
    """This instance's standing claims (see the module docstring; part of the tracker)."""

    def __init__(self, db: Database, channel: str, instance: str) -> None:
        self._db = db
        #: The session advisory lock this instance's listener holds (:func:`.wake.holder_of`).
        self._holder = holder_of(channel, instance)
        #: Standing claims by attempt key, while their parked claim lasts.
        self._ids: dict[str, list[tuple[str, str, str]]] = {}
        #: Rows written and withdrawn (tests read them).
        self.stood = 0
        self.withdrawn = 0

    def ids(self, key: str | None, n: int) -> list[tuple[str, str, str]] | None:
        """The ids a claim of ``n`` leases under ``key`` uses: those its standing claim made
        ahead (a create may have claimed with them), or None when ``key`` has none."""
        ids = None if key is None else self._ids.get(key)
        return ids if ids is not None and len(ids) == n else None

    async def stand(self, stand: Stand) -> None:
        """Write ``stand``'s row (a write of the UNLOGGED table only: no WAL flush); from now
        on a claim under its key uses its ids, until :meth:`forget`."""
        self._ids[stand.key] = stand.ids
        runs, leases, tokens = ([i[k] for i in stand.ids] for k in range(3))
        params = (
            stand.key,
            stand.role,
            stand.agent,
            stand.ttl_ms,
            stand.fingerprint,
            runs,
            leases,
            [token_hash(t) for t in tokens],
            *self._holder,
        )
        await self._db.run(
            lambda conn: conn.raw.execute(_STAND, params), "parked_claim", write=True, shared=True
        )
        self.stood += 1

    async def withdraw(self, stand: Stand) -> bool:
        """Delete ``stand``'s row: True when it was there (nothing was claimed for it), False
        when a create took it (or found its holder gone: its key's record says which)."""

        def delete(conn: PgConn) -> bool:
            return bool(conn.raw.execute(_WITHDRAW, (stand.key,)).rowcount)

        found = await self._db.run(delete, "parked_claim", write=True, shared=True)
        self.withdrawn += found
        return found

    def forget(self, stand: Stand) -> None:
        """The parked claim of ``stand`` has ended: its key's claims use fresh ids again."""
        with contextlib.suppress(KeyError):
            del self._ids[stand.key]


def offering(create: Callable[[Ctx], R]) -> Callable[[Ctx], R]:
    """``create`` (a task's id, or a list of them) followed, in its transaction, by
    ``bw_hand_off`` of the tasks it answers: standing claims of their roles claim in the same
    write (a deferred statement: no round trip of its own, nothing read back)."""

    def op(c: Ctx) -> R:
        created = create(c)
        ids = list(created) if isinstance(created, list) else [created]
        c.exec("standing.offer", (ids, c.now))
        return created

    return op


def stand_of(
    key: str,
    agent: str,
    role: str,
    ttl_ms: int,
    n: int,
    fingerprint: str,
    secret: bytes,
    now_ms: int,
) -> Stand:
    """The standing claim of attempt ``key`` (a parked claim's first): ``n`` leases' ids made
    now, their tokens derived from the rail's key ``secret`` and ``key``, as the rail's keyed
    claim derives them (a replay under ``key`` answers the same tokens)."""
    ids = [
        (run_id, lease_id, keyed_token(secret, lease_id, key))
        for run_id, lease_id, _ in fresh_ids_many(now_ms, n, random_tokens=False)
    ]
    return Stand(key, role, agent, ttl_ms, fingerprint, ids)
