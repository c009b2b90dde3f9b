"""``finish_many``: the final reports of many runs in one write (extension ``finish_many``).

A worker whose runs end together (ten no-op runs of one claim, say) would send ten
``transition`` requests and the rail would write ten transactions. ``finish_many`` takes them
all: each item is one ``finish`` (its events, then its transition or fail, with their own
checks, under its own lease token and idempotency key), written all or nothing inside a
savepoint of one transaction. Items are independent: one refused item (a lost lease, a stale
version, bad input) is rolled back alone and its error returned in its place; the others
commit. An error that is not the rail's answer to one item (the database itself failing)
fails the whole call, nothing written.

Nearly every batch is refused nothing, so the items are first written under one savepoint for
the whole batch (two statements per batch instead of two per item); only when an item is
refused is that savepoint rolled back and the batch written again item by item, each under its
own savepoint, which answers every item exactly as before (:func:`write_items`).

It touches what ``finish`` touches, through :mod:`.finish`; and the savepoints of the write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome
from tracker_client.errors import TrackerError
from tracker_client.rules import runs
from tracker_client.rules.common import Ctx
from tracker_client.rules.finish import Prepared, finish_keyed, prepare

__all__ = ["Ready", "prepared_item", "write_items"]

#: An item checked before the write (run id, token digest, its parts), or its refusal.
Ready = tuple[str, str, Prepared] | TrackerError


def prepared_item(item: FinishItem) -> Ready:
    """An item checked and split before the write: (run id, token digest, its parts), or the
    error refusing it (answered in its place; the other items go on)."""
    try:
        parts = prepare(item.events, item.transition, item.fail)
    except TrackerError as exc:
        return exc
    digest = runs.token_hash(item.lease.lease_token.get_secret_value())
    return item.lease.run_id, digest, parts


def write_items(
    ctx: Ctx, ready: Sequence[Ready], keys: Sequence[str | None], rng: Any
) -> list[FinishManyOutcome]:
    """Write each checked item (``finish`` under its ``key``) in the caller's transaction; per
    item its ``FinishResult`` or the error refusing it (that item alone wrote nothing).

    Two or more items are written under one savepoint first; an item refused rolls that back
    (its log lines and sweep counts too) and the batch is written again item by item."""
    if sum(not isinstance(r, TrackerError) for r in ready) > 1:
        logged, swept = len(ctx.logs), ctx.swept
        ctx.exec("finish_many.savepoint_batch")
        try:
            out: list[FinishManyOutcome] = [
                r if isinstance(r, TrackerError) else finish_keyed(ctx, *r, rng, key)
                for r, key in zip(ready, keys, strict=True)
            ]
        except TrackerError:
            ctx.exec("finish_many.rollback_batch")
            ctx.exec("finish_many.release_batch")
            del ctx.logs[logged:]
            ctx.swept = swept
        else:
            ctx.exec("finish_many.release_batch")
            return out
    return _item_by_item(ctx, ready, keys, rng)


def _item_by_item(
    ctx: Ctx, ready: Sequence[Ready], keys: Sequence[str | None], rng: Any
) -> list[FinishManyOutcome]:
    """Each item under a savepoint of its own: one refused is rolled back alone."""
    out: list[FinishManyOutcome] = []
    for item, key in zip(ready, keys, strict=True):
        if isinstance(item, TrackerError):
            out.append(item)
            continue
        logged = len(ctx.logs)
        ctx.exec("finish_many.savepoint")
        try:
            out.append(finish_keyed(ctx, *item, rng, key))
        except TrackerError as exc:
            ctx.exec("finish_many.rollback_item")
            del ctx.logs[logged:]
            out.append(exc)
        ctx.exec("finish_many.release_item")
    return out
