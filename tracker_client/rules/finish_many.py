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

from collections.abc import Sequence

from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome, check_items
from tracker_client.embedded.core import TrackerCore
from tracker_client.errors import TrackerError
from tracker_client.rules import runs
from tracker_client.rules.common import Ctx
from tracker_client.rules.finish import Prepared, finish_keyed, prepare

__all__ = ["FinishManyOps"]


def _prepared(item: FinishItem) -> tuple[str, str, Prepared] | TrackerError:
    try:
        parts = prepare(item.events, item.transition, item.fail)
    except TrackerError as exc:
        return exc
    digest = runs.token_hash(item.lease.lease_token.get_secret_value())
    return item.lease.run_id, digest, parts


class FinishManyOps(TrackerCore):
    """The ``finish_many`` operation of :class:`~tracker_client.embedded.EmbeddedTracker`."""

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """Write each item as ``finish`` would, in one transaction; per item, its
        :class:`~tracker_client.contract.batch_models.FinishResult` or the error that
        refused it (that item alone written nothing), in the items' order."""
        check_items(items)
        prepared = [_prepared(item) for item in items]
        keys = [item.idempotency_key for item in items]

        def op(ctx: Ctx) -> list[FinishManyOutcome]:
            out: list[FinishManyOutcome] = []
            for ready, key in zip(prepared, keys, strict=True):
                if isinstance(ready, TrackerError):
                    out.append(ready)
                    continue
                run_id, digest, parts = ready
                logged = len(ctx.logs)
                ctx.exec("finish_many.savepoint")
                try:
                    out.append(finish_keyed(ctx, run_id, digest, parts, self._rng, key))
                except TrackerError as exc:
                    ctx.exec("finish_many.rollback_item")
                    del ctx.logs[logged:]
                    out.append(exc)
                ctx.exec("finish_many.release_item")
            return out

        return await self._write("finish_many", op)
