"""``finish_many``: the final reports of many runs in one write (extension ``finish_many``).

A worker whose runs end together (ten no-op runs of one claim, say) would send ten
``transition`` requests and the rail would write ten transactions. ``finish_many`` takes them
all: each item is one ``finish`` (its events, then its transition or fail, with their own
checks, under its own lease token and idempotency key), written all or nothing inside a
savepoint of one transaction. Items are independent: one refused item (a lost lease, a stale
version, bad input) is rolled back alone and its error returned in its place; the others
commit. An error that is not the rail's answer to one item (the database itself failing)
fails the whole call, nothing written.

It touches what ``finish`` touches, through :mod:`.finish`; and the savepoints of the write.
"""

from __future__ import annotations

from tracker_client.contract.batch_models import FinishItem
from tracker_client.errors import TrackerError
from tracker_client.rules import runs
from tracker_client.rules.finish import Prepared, prepare

__all__ = ["prepared_item"]


def prepared_item(item: FinishItem) -> tuple[str, str, Prepared] | TrackerError:
    """An item checked and split before the write: (run id, token digest, its parts), or the
    error refusing it (answered in its place; the other items go on)."""
    try:
        parts = prepare(item.events, item.transition, item.fail)
    except TrackerError as exc:
        return exc
    digest = runs.token_hash(item.lease.lease_token.get_secret_value())
    return item.lease.run_id, digest, parts
