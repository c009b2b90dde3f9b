"""The PostgreSQL rail's one-round-trip transition (``bw_transition``, schema 6).

A worker's plain transition (no ``wait_for``) is the most frequent write after the claim. The
embedded ``transition`` reads the lease, works out the move from the pipeline and writes; over a
network each of those is a round trip. Here the move is worked out first, in Python, from what
this instance handed out: a claim remembers its lease's pipeline and stage (:meth:`_remember`),
and the pipeline is the cached, parsed one (the embedded rail's own rules: ``find``,
``role_of``, ``is_terminal``, the event's text, the idempotency fingerprint and record). The
function then checks, with the task's row locked, that the lease is live under this token and
the task still in that pipeline and stage, and writes; ``bw_transition_tx`` (schema 9) takes the
write lock (shared) and sends the wake-ups itself, one prepared statement in its own
transaction (:meth:`.db.Database.one_call`).

Whenever it cannot answer exactly (a lease it did not hand out, an unknown move, a replayed
key, a lost lease, a moved task, INFO logging on, which wants the queue depth) it writes
nothing and the embedded ``transition`` runs, which answers it the embedded way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from tracker_client.capabilities import LeaseRef
from tracker_client.embedded.core import TrackerCore
from tracker_client.errors import TrackerError
from tracker_client.models import Lease, TransitionResult
from tracker_client.postgres.dialect import STATEMENTS
from tracker_client.rules.common import MIB, dumps
from tracker_client.rules.idempotency import fingerprint
from tracker_client.rules.pipelines import PipelineCache
from tracker_client.rules.runs import token_hash

__all__ = ["MOVE_FIELDS", "REMEMBERED", "PgHotOps"]

log = logging.getLogger("backlog_worker.tracker")

#: Leases remembered per instance (the oldest forgotten first: its transition takes the
#: embedded path, nothing else changes).
REMEMBERED = 4096

#: ``bw_transition_tx`` (schema 9): the lock, wake-ups and ``bw_transition`` in one statement.
_CALL = STATEMENTS["hot.transition_tx"]
#: The order of ``bw_transition``'s / ``bw_move``'s parameters after the lock and wake-ups.
MOVE_FIELDS = (
    *("run", "token", "pipeline", "stage", "version", "to", "role", "terminal", "usage"),
    *("event", "now", "key", "fp", "result"),
)


class PgHotOps(TrackerCore):
    """``transition`` in one round trip where this instance can work the move out itself."""

    _channel: str
    _follow_channel: str
    _instance: str

    def _wake_args(self, *, notify: bool = True, follow: bool = True) -> list[Any]:
        """The first parameters of a ``bw_*_tx`` call: the write lock's name, the rail's
        channel (None: a quiet write), the follow channel (None: nothing a follower reads),
        this instance's name (its own listener ignores what it sent)."""
        db: Any = self._db
        return [
            db.lock_name,
            self._channel if notify else None,
            self._follow_channel if follow else None,
            self._instance,
        ]

    async def _claimed_short(self) -> None:
        """A claim leased fewer than asked (the rail's tracker keeps a ``waiters`` row then:
        see :mod:`.idle`); nothing here."""

    def _remember(self, leases: Sequence[Lease]) -> None:
        """Note the pipeline and stage of leases handed out (see the module docstring)."""
        known: dict[str, tuple[str, str]] | None = self.__dict__.get("_leased")
        if known is None:
            known = self.__dict__["_leased"] = {}
        for lease in leases:
            if len(known) >= REMEMBERED:
                known.pop(next(iter(known)))
            known[lease.run_id] = (lease.task.pipeline_id, lease.task.stage)

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
        moved: TransitionResult = await super().transition(  # type: ignore[misc]  # embedded
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
        args = [
            lease.run_id,
            token_hash(lease.lease_token.get_secret_value()),
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
            lambda result: (args, result.model_dump(mode="json")),
        )
        if planned is None:
            return None
        params, result = planned
        db: Any = self._db
        try:
            found = await db.one_call(
                _CALL, [*self._wake_args(), *(params[f] for f in MOVE_FIELDS)], "transition"
            )
        finally:
            self._notify()  # committed or not: a waiter looks again, as after any write
            self._wake_followers()
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
        record: Callable[[TransitionResult], tuple[Any, Any]],
    ) -> tuple[dict[str, Any], TransitionResult] | None:
        """The parameters of ``bw_transition``/``bw_move`` for a plain transition of a lease
        this instance handed out, and its answer; None when the embedded path must answer
        (see the module docstring). ``record(result)``: the idempotency fingerprint's
        arguments and the recorded answer."""
        known: dict[str, tuple[str, str]] = self.__dict__.get("_leased") or {}
        where = known.pop(lease.run_id, None)
        if where is None or wait_for or log.isEnabledFor(logging.INFO):
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
        pipeline = cache._by_id.get(pid)  # parsed at the claim; never fetched here
        if pipeline is None or not isinstance(trigger, str):
            return None
        if expected_stage is not None and expected_stage != stage:
            return None
        move = pipeline.find(stage, trigger)
        if move is None:
            return None
        to = move.to_state
        text = instructions if instructions is not None else (move.instructions or "")
        result = TransitionResult(previous_stage=stage, new_stage=to, trigger=trigger)
        try:
            usage_text = None if usage is None else dumps(usage, "usage", max_bytes=MIB)
            event = dumps(
                {"trigger": trigger, "from": stage, "to": to, "instructions": text}, "event data"
            )
            args, answer = record(result)
            fp = None if key is None else fingerprint(args)
        except TrackerError:
            return None  # the embedded path refuses it, in its own order
        params = {
            "run": lease.run_id,
            "token": token_hash(lease.lease_token.get_secret_value()),
            "pipeline": pid,
            "stage": stage,
            "version": version,
            "to": to,
            "role": pipeline.role_of(to),
            "terminal": int(pipeline.is_terminal(to)),
            "usage": usage_text,
            "event": event,
            "now": int(self._clock()),
            "key": key,
            "fp": fp,
            "result": json.dumps(answer, separators=(",", ":")),
        }
        return params, result
