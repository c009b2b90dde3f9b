"""The live worker registry (extension ``workers``): who is working on this rail, and on what.

A worker process registers itself with :meth:`~.rail.Rail.register_worker` (one upsert of a row
of ``workers``, schema 0006) at start and at every refresh; the same call stamps
``last_seen_at_ms`` with the rail's clock. Nothing else is stored about its life: the state is
read at read time, from the row and the rail's clock:

* ``stopped``: the worker said goodbye (``stopping``) on a clean shutdown;
* ``lost``: it has been silent for longer than its ``lost_after_ms`` (killed, host gone,
  partitioned);
* ``alive`` otherwise.

What a worker runs now is not stored either: it is the ``running`` runs whose task still holds
their live lease and whose ``agent_id`` is the worker's (the agent id of its claims). Workers
that share one agent id (a configured ``agent_id`` in a config several processes read; the
default, ``<host>-<pid>``, is one per process) are told apart by ``run_ids``, the runs each
said it held at its last refresh: a run is shown on the worker that reported it, and a run no
one reported yet (claimed since) on the newest of them that is alive. A stopped worker runs
nothing.

A row silent for :data:`FORGET_AFTER_MS` (7 days) is no longer listed, and is deleted by the
next registration on the rail. This room touches the ``workers`` table and reads runs and
leases.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, get_args

from pydantic import ValidationError

from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.observe_models import RunningTask, WorkerInfo, WorkerRegister, WorkerState
from tracker_client.rules.common import Ctx, dumps
from tracker_client.validation import problems

if TYPE_CHECKING:
    import sqlite3

__all__ = ["FORGET_AFTER_MS", "STATES", "state_of"]

#: A worker silent this long (stopped or lost) is forgotten.
FORGET_AFTER_MS = 7 * 86_400_000
#: The states, in the order a listing shows them.
STATES: tuple[WorkerState, ...] = get_args(WorkerState)
#: Bounds of a registration (longer strings and lists are refused, naming the field).
MIN_LOST_AFTER_MS = 100
MAX_SLOTS = 10_000
MAX_TEXT = 255
MAX_ROLES = 1_000
MAX_RUN_IDS = 10_000


def state_of(row: sqlite3.Row | Mapping[str, Any], now_ms: int) -> WorkerState:
    """``stopped`` after a goodbye, ``lost`` when silent past ``lost_after_ms``, else
    ``alive``."""
    if row["stopping"]:
        return "stopped"
    if now_ms - int(row["last_seen_at_ms"]) > int(row["lost_after_ms"]):
        return "lost"
    return "alive"


def _text(field: str, value: str, limit: int = MAX_TEXT) -> None:
    if not value.strip():
        raise ValidationFailed(f"{field}: must not be empty")
    if len(value) > limit:
        raise ValidationFailed(f"{field}: at most {limit} characters, got {len(value)}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValidationFailed(f"{field}: control characters are not allowed")


def check_registration(worker_id: object, fields: Mapping[str, Any]) -> WorkerRegister:
    """The registration as the rail stores it; ``ValidationFailed`` naming the first bad field
    (a wrong type, an empty or overlong string, pid < 1, slots outside 1..10000, no roles,
    ``lost_after_ms`` under 100 ms or over 7 days, an unknown field)."""
    if not isinstance(worker_id, str):
        raise ValidationFailed(f"worker_id: must be a string, got {worker_id!r}")
    _text("worker_id", worker_id)
    try:
        reg = WorkerRegister.model_validate(dict(fields), strict=True)
    except ValidationError as exc:
        first = problems(exc, WorkerRegister)[0]
        where = ".".join(str(part) for part in first.loc) or "body"
        raise ValidationFailed(f"{where}: {first.message}") from None
    for name in ("host", "version", "agent_id"):
        _text(name, getattr(reg, name))
    if reg.pid < 1:
        raise ValidationFailed(f"pid: must be 1 or more, got {reg.pid}")
    if not 1 <= reg.slots <= MAX_SLOTS:
        raise ValidationFailed(f"slots: must be 1..{MAX_SLOTS}, got {reg.slots}")
    if not reg.roles or len(reg.roles) > MAX_ROLES:
        raise ValidationFailed(f"roles: give 1..{MAX_ROLES} roles, got {len(reg.roles)}")
    for role in reg.roles:
        _text("roles", role)
    if reg.started_at_ms < 0:
        raise ValidationFailed(f"started_at_ms: must be 0 or more, got {reg.started_at_ms}")
    if not MIN_LOST_AFTER_MS <= reg.lost_after_ms <= FORGET_AFTER_MS:
        raise ValidationFailed(
            f"lost_after_ms: must be {MIN_LOST_AFTER_MS}..{FORGET_AFTER_MS}, "
            f"got {reg.lost_after_ms}"
        )
    if reg.run_ids is not None and len(reg.run_ids) > MAX_RUN_IDS:
        raise ValidationFailed(f"run_ids: at most {MAX_RUN_IDS}, got {len(reg.run_ids)}")
    return reg


def _check_state(state: object) -> WorkerState | None:
    if state is None:
        return None
    for known in STATES:
        if state == known:
            return known
    raise ValidationFailed(f"state: must be one of {', '.join(STATES)}; got {state!r}")


def _owners(ctx: Ctx, rows: Iterable[sqlite3.Row]) -> dict[str, list[RunningTask]]:
    """What each worker of ``rows`` runs now, by worker id (see the module docstring)."""
    by_agent: dict[str, list[sqlite3.Row]] = {}
    for row in rows:
        if state_of(row, ctx.now) != "stopped":
            by_agent.setdefault(row["agent_id"], []).append(row)
    running: dict[str, list[RunningTask]] = {}
    if not by_agent:
        return running
    if len(by_agent) == 1:  # one worker's answer (a refresh): only its agent's runs
        runs = ctx.all("workers.live_runs_of", (ctx.now, *by_agent))
    else:
        runs = ctx.all("workers.live_runs", (ctx.now,))
    for run in runs:
        sharers = by_agent.get(run["agent_id"])
        if not sharers:
            continue
        owner = sharers[0]
        if len(sharers) > 1:
            owner = _owner_among(ctx, sharers, run["id"])
        running.setdefault(owner["id"], []).append(
            RunningTask(
                task_id=run["task_id"],
                run_id=run["id"],
                role=run["agent_role"],
                started_at_ms=run["started_at_ms"],
            )
        )
    return running


def _owner_among(ctx: Ctx, sharers: list[sqlite3.Row], run_id: str) -> sqlite3.Row:
    for row in sharers:
        if row["run_ids"] is not None and run_id in json.loads(row["run_ids"]):
            return row
    alive = [r for r in sharers if state_of(r, ctx.now) == "alive"] or sharers
    return max(alive, key=lambda r: (int(r["started_at_ms"]), str(r["id"])))


def _info(ctx: Ctx, row: sqlite3.Row, running: Mapping[str, list[RunningTask]]) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        version=row["version"],
        roles=json.loads(row["roles"]),
        slots=row["slots"],
        agent_id=row["agent_id"],
        started_at_ms=row["started_at_ms"],
        last_seen_at_ms=row["last_seen_at_ms"],
        lost_after_ms=row["lost_after_ms"],
        state=state_of(row, ctx.now),
        running=list(running.get(row["id"], ())),
    )


def _rows(ctx: Ctx, agent_id: str | None = None) -> list[sqlite3.Row]:
    since = ctx.now - FORGET_AFTER_MS
    if agent_id is not None:
        return ctx.all("workers.seen_since_of", (since, agent_id))
    return ctx.all("workers.seen_since", (since,))


def register(ctx: Ctx, worker_id: object, fields: Mapping[str, Any]) -> WorkerInfo:
    """Upsert the worker's row (last seen: now), forget rows silent for 7 days, and answer the
    worker as listed. Nothing is written when a field is refused."""
    reg = check_registration(worker_id, fields)
    assert isinstance(worker_id, str)
    ctx.exec("workers.forget_silent", (ctx.now - FORGET_AFTER_MS, worker_id))
    run_ids = None if reg.run_ids is None else dumps(reg.run_ids, "run_ids")
    ctx.exec(
        "workers.upsert",
        (
            worker_id,
            reg.host,
            reg.pid,
            reg.version,
            dumps(reg.roles, "roles"),
            reg.slots,
            reg.agent_id,
            run_ids,
            reg.started_at_ms,
            ctx.now,
            ctx.now,
            reg.lost_after_ms,
            int(reg.stopping),
        ),
    )
    rows = _rows(ctx, reg.agent_id)
    (row,) = [r for r in rows if r["id"] == worker_id]
    return _info(ctx, row, _owners(ctx, rows))


def list_all(ctx: Ctx, state: object = None) -> list[WorkerInfo]:
    """Every worker seen in the last 7 days (only ``state`` ones when given): alive first,
    then lost, then stopped, each by start time."""
    wanted = _check_state(state)
    rows = _rows(ctx)
    running = _owners(ctx, rows)
    infos = [_info(ctx, row, running) for row in rows]
    infos.sort(key=lambda w: (STATES.index(w.state), w.started_at_ms, w.id))
    return [w for w in infos if wanted is None or w.state == wanted]


def forget(ctx: Ctx, worker_id: str) -> WorkerInfo:
    """Delete a worker's row (answers it as it was); ``NotFound`` when there is none."""
    row = ctx.one("workers.get", (worker_id,))
    if row is None:
        raise NotFound(f"worker {worker_id!r} is not registered", code="worker_not_found")
    answer = _info(ctx, row, _owners(ctx, _rows(ctx, row["agent_id"])))
    ctx.exec("workers.delete", (worker_id,))
    return answer
