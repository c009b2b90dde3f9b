"""Standing claims (schema 21): an idle parked claim the create that brings its work claims for.

An idle worker's parked claim on PostgreSQL sleeps until a NOTIFY (:class:`~.idle.IdleLook`);
woken, it sent its keyed claim: a write with its own WAL flush and an idle backend waking, ~3
ms of a ~6 ms pickup (docs/benchmarks/pickup.md). While it sleeps it now *stands*:
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

The grant itself travels with the wake-up: after its offer, the create sends the rows of the
tasks it leased (``standing.grants``: JSON, each row without its token digest) in one NOTIFY
on the rail's *grant channel* (:func:`grant_channel`), which each instance's listener also
listens on (:mod:`.wake`). The woken standing claim finds its rows there by their run ids (it
made them) and builds its leases from them and the tokens it derived: its claim under the key
sends nothing (:meth:`StandingClaims.granted_rows`): from the NOTIFY to the executor's start
0.64 ms instead of 1.5-1.6 (docs/benchmarks/pickup.md). A create that found no
claim standing when its offer began looks no task up for it (the offer notes it in a
transaction-local setting): a create costs what it did where no worker is idle. Nothing else
changes: the grant is the create's claim under the key,
recorded; the lease is checked by its token's digest at every write (fencing); a NOTIFY
missed or too large (over :data:`GRANT_PAYLOAD_MAX` bytes: nothing sent) leaves the read to
do it, as before. The channel's name derives from the rail's key (a secret only a role that
can read the rail's tables holds), so a role that may connect but not read the rail cannot
learn it to listen; the payload holds what such a role could read anyway, never a token.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tracker_client.postgres.claims import array_literal
from tracker_client.postgres.db import Database
from tracker_client.postgres.dialect import STATEMENTS, PgConn, Row
from tracker_client.postgres.wake import holder_of
from tracker_client.rules.claims import fresh_ids_many
from tracker_client.rules.common import Ctx
from tracker_client.rules.leasekeys import keyed_token
from tracker_client.rules.runs import token_hash

__all__ = [
    "GRANT_PAYLOAD_MAX",
    "STAND_CALL",
    "Stand",
    "StandingClaims",
    "grant_channel",
    "offering",
    "stand_of",
]

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

#: The largest grant a create sends in its NOTIFY (bytes of JSON; PostgreSQL's payload limit is
#: 8000): ``standing.grants`` sends nothing above it, and the woken claim reads its leases.
GRANT_PAYLOAD_MAX = 7900


#: Columns a grant's row must have to be taken (what building its lease reads first); a row
#: without them is passed over and the claim reads its leases.
_GRANT_COLUMNS = frozenset(
    ("id", "metadata", "last_attempt", "checkpointed", "lease_expires_at_ms", "lease_ttl_ms")
)


def grant_channel(rail_key: bytes) -> str:
    """The rail's grant channel (see the module docstring): ``standing.grants`` names it the
    same way, from the key's hex text as ``rail_secrets`` stores it."""
    text = b"grants:" + rail_key.hex().encode()
    return "bwg_" + hashlib.sha256(text).hexdigest()[:40]


def _row(fields: dict[str, object]) -> Row:
    """A task row of a grant's JSON as the claim's read answers it (the token digest, left
    out of the NOTIFY, is None: nothing built from the row reads it)."""
    fields["lease_token_sha256"] = None
    spent = fields.get("spent_usd")
    if isinstance(spent, int):  # a DOUBLE PRECISION column: JSON writes 0.0 as 0
        fields["spent_usd"] = float(spent)
    return Row(list(fields.values()), {name: i for i, name in enumerate(fields)})


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
        #: Their run ids made ahead -> their attempt key (a grant's rows name their runs).
        self._keys: dict[str, str] = {}
        #: Rows a create granted (its NOTIFY), by attempt key, until its claim takes them.
        self._grants: dict[str, list[Row]] = {}
        #: The rail's grant channel once named (:meth:`grants_on`; None: no grants).
        self.channel: str | None = None
        #: Rows written and withdrawn; claims answered from a grant's NOTIFY (tests read them).
        self.stood = 0
        self.withdrawn = 0
        self.granted = 0

    def ids(self, key: str | None, n: int) -> list[tuple[str, str, str]] | None:
        """The ids a claim of ``n`` leases under ``key`` uses: those its standing claim made
        ahead (a create may have claimed with them), or None when ``key`` has none."""
        ids = None if key is None else self._ids.get(key)
        return ids if ids is not None and len(ids) == n else None

    async def stand(self, stand: Stand) -> None:
        """Write ``stand``'s row (a write of the UNLOGGED table only: no WAL flush); from now
        on a claim under its key uses its ids, until :meth:`forget`."""
        self._ids[stand.key] = stand.ids
        for run_id, _, _ in stand.ids:
            self._keys[run_id] = stand.key
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
        self._grants.pop(stand.key, None)
        for run_id, _, _ in stand.ids:
            self._keys.pop(run_id, None)

    def grants_on(self, rail_key: bytes) -> tuple[str, Callable[[str], None], str]:
        """Take grants on the rail's grant channel (:func:`grant_channel` of ``rail_key``):
        the channel, what takes its payloads and the rail's schema (whose ``bw_listen_grants``
        listens there), for the wake-up listener; this instance's creates send their grants
        there from now on."""
        self.channel = grant_channel(rail_key)
        return self.channel, self.grant, self._db.schema

    def grant(self, payload: str) -> None:
        """A create's grant (the NOTIFY on the grant channel, see the module docstring): the
        rows leased under this instance's standing claims are kept for their claims. Others'
        grants are passed over without being parsed; a payload that does not read is ignored
        (the claim reads its leases)."""
        keys = self._keys
        if not any(run_id in payload for run_id in keys):
            return
        try:
            rows = json.loads(payload)
        except ValueError:
            return
        if not isinstance(rows, list):
            return
        got: dict[str, list[Row]] = {}
        unread: set[str] = set()  # a key with a row that does not read: its claim reads all
        for fields in rows:
            run_id = fields.get("lease_run_id") if isinstance(fields, dict) else None
            key = keys.get(run_id) if isinstance(run_id, str) else None
            if key is None:
                continue
            if fields.keys() >= _GRANT_COLUMNS:
                got.setdefault(key, []).append(_row(fields))
            else:
                unread.add(key)
        for key, granted in got.items():
            if key not in unread:
                self._grants[key] = granted

    def granted_rows(self, key: str | None) -> list[Row] | None:
        """The rows a create granted the standing claim of ``key``, as its NOTIFY sent them
        (taken: once), or None when none came (the claim reads them, or claims)."""
        rows = None if key is None else self._grants.pop(key, None)
        if rows is not None:
            self.granted += 1
        return rows


def offering(create: Callable[[Ctx], R], grants: bool = False) -> Callable[[Ctx], R]:
    """``create`` (a task's id, or a list of them) followed, in its transaction, by
    ``bw_hand_off`` of the tasks it answers: standing claims of their roles claim in the same
    write (a deferred statement: no round trip of its own, nothing read back), and, with
    ``grants``, what they were granted goes out in the NOTIFY of ``standing.grants`` on the
    rail's grant channel (deferred too; the server names the channel). The ids go as one
    array literal (task ids are ours: nothing in them needs quoting), not a list each
    statement adapts."""

    def op(c: Ctx) -> R:
        created = create(c)
        ids = array_literal(
            [str(i) for i in created] if isinstance(created, list) else [str(created)]
        )
        c.exec("standing.offer", (ids, c.now))
        if grants:
            c.exec("standing.grants", (ids,))
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
