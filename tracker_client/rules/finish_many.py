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

import json
from collections.abc import Sequence
from typing import Any

from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome, FinishResult
from tracker_client.errors import TrackerError
from tracker_client.rules import runs
from tracker_client.rules.common import Ctx
from tracker_client.rules.finish import Prepared, encode, finish_keyed, keyed_args, prepare
from tracker_client.rules.idempotency import fingerprint

__all__ = ["Ready", "plain_batch", "prepared_item", "write_items"]

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

    A batch of plain transitions (:func:`plain_batch`) is checked whole, then written with no
    savepoint. Otherwise two or more items are written under one savepoint first; an item
    refused rolls that back (its log lines and sweep counts too) and the batch is written
    again item by item."""
    planned = plain_batch(ctx, ready, keys)
    if planned is not None:
        return planned
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


#: The fields of a transition item :func:`plain_batch` writes (any other: ``finish``'s path).
_PLAIN_FIELDS = frozenset(
    {"trigger", "expected_stage", "expected_task_version", "instructions", "usage", "wait_for"}
)


def plain_batch(
    ctx: Ctx, ready: Sequence[Ready], keys: Sequence[str | None]
) -> list[FinishManyOutcome] | None:
    """The answers of a batch whose every checked item is a plain transition (no events, no
    ``wait_for``, no budget to count: :func:`.runs.plain_move`) of a run of its own, under a
    fresh key of its own or none, all of them accepted: checked whole first (reads only; the
    batch's keys looked up in one statement), then written as ``finish`` writes each, in the
    items' order. None, having written nothing, for any other batch (an item refused, a
    replayed key, a fail, ...): the item paths answer it. Items refused before the write are
    answered in their place."""
    moves: list[tuple[runs.PlainMove, str | None, str | None]] = []
    seen_runs: set[str] = set()
    seen_keys: set[str] = set()
    try:
        for item, key in zip(ready, keys, strict=True):
            if isinstance(item, TrackerError):
                continue
            run_id, digest, parts = item
            events, moved, failed = parts
            if events or moved is None or failed is not None or run_id in seen_runs:
                return None
            if not _PLAIN_FIELDS.issuperset(moved) or moved.get("wait_for"):
                return None
            seen_runs.add(run_id)
            fp = None
            if key is not None:
                if not isinstance(key, str) or not key or len(key) > 255 or key in seen_keys:
                    return None  # refused, or the second use of one key: the item paths
                seen_keys.add(key)
                fp = fingerprint(keyed_args(run_id, digest, parts))
            move = runs.plain_move(
                ctx,
                run_id,
                digest,
                moved.get("trigger"),
                moved.get("expected_stage"),
                moved.get("expected_task_version"),
                moved.get("instructions"),
                moved.get("usage"),
            )
            if move is None:
                return None
            moves.append((move, key, fp))
        if not moves:
            return None
    except TrackerError:
        return None  # refused: the item paths answer it, in their own order
    if seen_keys:  # one look for the batch's keys (a statement per key cost ~1 per task)
        recorded = ctx.one("idempotency.any_recorded", (json.dumps([*seen_keys]), "finish"))
        if recorded is not None:
            return None  # a replay (or a conflict) in the batch: answered by its record
    held = any(move.held is not None for move, _, _ in moves)
    if held:  # a move checked against its lease as handed out may find the row moved on
        ctx.exec("finish_many.savepoint_batch")
    try:
        runs.write_moves(ctx, [move for move, _, _ in moves])
    except runs.StaleLease:
        ctx.exec("finish_many.rollback_batch")
        ctx.exec("finish_many.release_batch")
        return None  # nothing written: the item paths read the rows and answer
    if held:
        ctx.exec("finish_many.release_batch")
    done = iter(moves)
    out: list[FinishManyOutcome] = []
    records: list[tuple[str, str, str | None, str, int]] = []
    #: The record's text by its answer's id: a move planned once per transaction shares its
    #: answer (runs.plain_move), so its runs' records are one text, encoded once.
    texts: dict[int, str] = {}
    for item in ready:
        if isinstance(item, TrackerError):
            out.append(item)
            continue
        move, key, fp = next(done)
        result = FinishResult(event_ids=[], transition=move.result)
        if key is not None:
            record = texts.get(id(move.result))
            if record is None:
                record = json.dumps(encode(result), separators=(",", ":"))
                texts[id(move.result)] = record
            records.append((key, "finish", fp, record, ctx.now))
        out.append(result)
    if records:
        ctx.many("idempotency.record", records)
    return out


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
