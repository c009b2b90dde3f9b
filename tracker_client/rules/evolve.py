"""Pipeline evolution: apply a new definition as a new version, in one transaction.

``pipeline apply -f FILE`` (docs/operate/pipelines.md) hands a pipeline's name, its definition
and its ``moves`` (old stage -> stage of the new definition) to :func:`apply`; ``pipeline diff``
hands them to :func:`plan`, which answers the same
:class:`~tracker_client.ops_models.PipelinePlan` and writes nothing. The rules:

* a definition equal to the current one (key order aside) whose moves were all applied before
  is *unchanged*: nothing is written (so a deploy may run the same file again);
* otherwise the definition is checked as every new one is and stored as the next version
  (``pipeline_versions``; ``pipelines.definition`` stays the current one, which a release
  before this one reads);
* tasks not running (waiting, delayed, dead-lettered, finished) are brought to the new version
  in the same write: their stage's role and terminal flag, and each retry setting that was the
  pipeline's (a task's own setting is kept);
* a stage the new definition removes may not hold tasks, nor be where a running task's run may
  take it, unless ``moves`` maps it to a stage of the new definition: the apply is refused
  (``Conflict`` ``stage_holds_tasks``) naming each stage and its tasks;
* a running task keeps its version: its transition is judged against the definition it was
  claimed under, then it lands in the current version (its target stage through the moves of
  every later version: :func:`~tracker_client.rules.versions.landing`). One whose run ended
  another way is brought forward by the next maintenance pass
  (:func:`~tracker_client.rules.versions.forward_pending`).

A stage holding tasks may not turn from terminal to working or back (finished tasks would start
again, waiting ones would count as finished): add a new stage and move them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracker_client.errors import Conflict, ValidationFailed
from tracker_client.ops_models import PipelinePlan
from tracker_client.rules.common import Ctx, dumps
from tracker_client.rules.pipelines import PipelineDef, validate_definition
from tracker_client.rules.tasks import create_pipeline
from tracker_client.rules.versions import map_stage

__all__ = ["apply", "plan"]

#: Each retry setting of a task and the statement that brings it to the pipeline's new one.
_RETRY_FIELDS = {
    "max_attempts": "pipelines.retry_max_attempts",
    "retry_delay_ms": "pipelines.retry_retry_delay_ms",
    "backoff": "pipelines.retry_backoff",
    "max_retry_delay_ms": "pipelines.retry_max_retry_delay_ms",
    "dead_letter_stage": "pipelines.retry_dead_letter_stage",
}


def _fail(message: str) -> ValidationFailed:
    return ValidationFailed(f"pipeline apply: {message}", code="validation_failed")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _edge(t: Mapping[str, Any]) -> str:
    return f"{t.get('from')}:{t.get('trigger')}:{t.get('to')}"


def _check_moves(moves: Any) -> dict[str, str]:
    if moves is None:
        return {}
    if not isinstance(moves, Mapping):
        raise _fail(f"'moves' must be a table of old stage = new stage, got {moves!r}")
    out: dict[str, str] = {}
    for old, new in moves.items():
        if not isinstance(old, str) or not old or not isinstance(new, str) or not new:
            raise _fail(
                f"'moves': {old!r} = {new!r}: each move maps a stage name to a stage name "
                '(moves = { old = "new" })'
            )
        out[old] = new
    return out


def _history(ctx: Ctx, pid: str) -> dict[str, str]:
    """Every move recorded for ``pid``, each old stage followed through later moves."""
    chain: dict[str, str] = {}
    for row in ctx.all("pipelines.moves_after", (pid, 0)):
        step: dict[str, str] = json.loads(row["moves"])
        for old in list(chain):
            chain[old] = step.get(chain[old], chain[old])
        for old, new in step.items():
            chain.setdefault(old, new)
    return chain


@dataclass
class _Diff:
    """The definition's changes, and the tasks they concern."""

    plan: PipelinePlan
    current: PipelineDef
    new: PipelineDef
    moves: dict[str, str]
    #: Per stage: (tasks, unfinished, leased).
    counts: dict[str, tuple[int, int, int]]


def _structure(current: PipelineDef, new: PipelineDef) -> dict[str, list[str]]:
    old_states = current.definition.get("states") or {}
    new_states = new.definition.get("states") or {}
    changed: list[str] = []
    for name in new.states:
        if name not in current.states:
            continue
        before, after = old_states.get(name) or {}, new_states.get(name) or {}
        for key in sorted(set(before) | set(after)):
            if _canonical(before.get(key)) != _canonical(after.get(key)):
                changed.append(f"{name}: {key} {before.get(key)!r} -> {after.get(key)!r}")
    old_edges = {_canonical(t): _edge(t) for t in current.definition.get("transitions") or []}
    new_edges = {_canonical(t): _edge(t) for t in new.definition.get("transitions") or []}
    settings: list[str] = []
    for key in sorted(set(current.definition) | set(new.definition)):
        if key in ("states", "transitions"):
            continue
        old, now = current.definition.get(key), new.definition.get(key)
        if _canonical(old) != _canonical(now):
            settings.append(f"{key}: {old!r} -> {now!r}")
    return {
        "stages_added": [s for s in new.states if s not in current.states],
        "stages_removed": [s for s in current.states if s not in new.states],
        "stages_changed": changed,
        "transitions_added": [e for k, e in new_edges.items() if k not in old_edges],
        "transitions_removed": [e for k, e in old_edges.items() if k not in new_edges],
        "settings_changed": settings,
    }


def _counts(ctx: Ctx, pid: str) -> dict[str, tuple[int, int, int]]:
    counts: dict[str, tuple[int, int, int]] = {}
    for row in ctx.all("pipelines.stage_counts", (pid,)):
        counts[str(row["stage"])] = (int(row["n"]), int(row["unfinished"]), int(row["leased"]))
    return counts


def _moves_checked(
    ctx: Ctx, current: PipelineDef, new: PipelineDef, moves: dict[str, str], same: bool
) -> tuple[dict[str, str], bool]:
    """The moves this apply makes, and whether every given move was applied before."""
    done = _history(ctx, current.id)
    todo: dict[str, str] = {}
    for old, target in moves.items():
        if target not in new.states:
            raise _fail(
                f"'moves': {old} -> {target}: {target!r} is not a stage of the new definition "
                f"(its stages: {', '.join(new.states)})"
            )
        if old not in current.states:
            if done.get(old) == target:
                continue  # applied by an earlier version: the file is run again
            raise _fail(
                f"'moves': {old!r} is not a stage of pipeline {current.name!r} (version "
                f"{current.version}; its stages: {', '.join(current.states)})"
            )
        if old in new.states:
            raise _fail(
                f"'moves': stage {old!r} is still in the new definition: moves map only the "
                "stages the new definition removes or renames"
            )
        todo[old] = target
    return todo, not todo and same


def _problems(ctx: Ctx, d: _Diff) -> list[tuple[str, str]]:
    """Why the apply must be refused: (stage, what) for each stage holding tasks that it
    would strand."""
    removed = [s for s in d.current.states if s not in d.new.states and s not in d.moves]
    problems: list[tuple[str, str]] = []
    dead_from = {
        str(r["stage"]): int(r["n"])
        for r in ctx.all("pipelines.dead_letter_from_counts", (d.current.id,))
    }
    landing: dict[str, int] = {}
    for row in ctx.all("pipelines.leased", (d.current.id,)):
        under = ctx.pipelines.at(ctx, d.current.id, row["pipeline_version"]) or d.current
        seen = set()
        for t in under.transitions:
            if t.from_state == row["stage"] and t.to_state not in seen:
                seen.add(t.to_state)
                to = map_stage(ctx, d.current.id, under.version, t.to_state)
                landing[to] = landing.get(to, 0) + 1
    for stage in removed:
        n, unfinished, leased = d.counts.get(stage, (0, 0, 0))
        if n:
            problems.append(
                (
                    stage,
                    f"stage {stage!r} holds {n} task(s) ({unfinished} unfinished, "
                    f"{leased} running)",
                )
            )
        elif dead_from.get(stage):
            problems.append(
                (
                    stage,
                    f"stage {stage!r} is where {dead_from[stage]} dead-lettered task(s) "
                    "go back when requeued",
                )
            )
        elif landing.get(stage):
            problems.append(
                (
                    stage,
                    f"stage {stage!r} is where {landing[stage]} running task(s) may move "
                    "when their run ends",
                )
            )
    for stage in d.new.states:
        if stage not in d.current.states or stage not in d.counts:
            continue
        was, now = d.current.is_terminal(stage), d.new.is_terminal(stage)
        if was != now:
            n = d.counts[stage][0]
            turn = (
                "from terminal to working (finished tasks would start again)"
                if was
                else "from working to terminal (waiting tasks would count as done)"
            )
            problems.append(
                (
                    "",
                    f"stage {stage!r} holds {n} task(s) and would turn {turn}: add a new "
                    "stage and move them there instead",
                )
            )
    return problems


def _diff(ctx: Ctx, name: str, definition: Any, moves: Any) -> _Diff | PipelinePlan:
    """The diff of ``definition`` against pipeline ``name`` (a plan to create it if none)."""
    if not isinstance(name, str) or not name:
        raise _fail("the pipeline name must be a non-empty string")
    given = _check_moves(moves)
    new = validate_definition(definition)
    row = ctx.one("pipelines.by_name", (name,))
    if row is None:
        for old, target in given.items():
            if target not in new.states:
                raise _fail(
                    f"'moves': {old} -> {target}: {target!r} is not a stage of the new "
                    f"definition (its stages: {', '.join(new.states)})"
                )
        return PipelinePlan(
            name=name,
            created=True,
            version=1,
            stages_added=list(new.states),
            transitions_added=[_edge(t) for t in new.definition["transitions"]],
        )
    current = ctx.pipelines.get(ctx, str(row["id"]))
    assert current is not None
    same = _canonical(current.definition) == _canonical(new.definition)
    todo, unchanged = _moves_checked(ctx, current, new, given, same)
    if unchanged:  # no task is read: a deploy re-running the file costs one look
        plan = PipelinePlan(
            name=name,
            pipeline_id=current.id,
            unchanged=True,
            from_version=current.version,
            version=current.version,
        )
        return _Diff(plan, current, new, {}, {})
    counts = _counts(ctx, current.id)
    leased = sum(c[2] for c in counts.values())
    plan = PipelinePlan(
        name=name,
        pipeline_id=current.id,
        from_version=current.version,
        version=current.version + 1,
        moves=todo,
        tasks_moving={
            old: counts.get(old, (0, 0, 0))[0] - counts.get(old, (0, 0, 0))[2] for old in todo
        },
        tasks_updated=sum(c[0] - c[2] for c in counts.values()),
        tasks_running=leased,
        **_structure(current, new),
    )
    return _Diff(plan, current, new, todo, counts)


def plan(ctx: Ctx, name: str, definition: Any, moves: Any = None) -> PipelinePlan:
    """What :func:`apply` would do, writing nothing; refused as the apply would be."""
    d = _diff(ctx, name, definition, moves)
    if isinstance(d, PipelinePlan):
        return d
    problems = [] if d.plan.unchanged else _problems(ctx, d)
    if problems:
        raise _refusal(d, problems)
    return d.plan


def _refusal(d: _Diff, problems: list[tuple[str, str]]) -> Conflict:
    removed = [stage for stage, _ in problems if stage]
    example = ", ".join(f'{stage} = "<new stage>"' for stage in removed)
    fix = (
        f"map each removed stage to a stage of the new definition with moves (in the file: "
        f"moves = {{ {example} }}) or let its tasks finish first"
        if removed
        else "nothing was changed"
    )
    return Conflict(
        f"pipeline {d.current.name!r} (version {d.current.version}): the new definition "
        f"would strand tasks: {'; '.join(text for _, text in problems)}; {fix}",
        code="stage_holds_tasks",
    )


def apply(ctx: Ctx, name: str, definition: Any, moves: Any = None) -> PipelinePlan:
    """Create pipeline ``name`` or store ``definition`` as its next version, with ``moves``,
    in this one transaction (see the module docstring); the answer says what it did."""
    d = _diff(ctx, name, definition, moves)
    if isinstance(d, PipelinePlan):
        pid = create_pipeline(ctx, name, definition)
        return d.model_copy(update={"pipeline_id": pid, "applied": True})
    if d.plan.unchanged:
        return d.plan
    problems = _problems(ctx, d)
    if problems:
        raise _refusal(d, problems)
    _write(ctx, d)
    ctx.log(
        "pipeline_applied",
        f"pipeline {d.current.name} version {d.plan.version}: " + "; ".join(d.plan.changes()[:10]),
        pipeline_id=d.current.id,
    )
    return d.plan.model_copy(update={"applied": True})


def _write(ctx: Ctx, d: _Diff) -> None:
    cur, new, pid = d.current, d.new, d.current.id
    old_v, new_v = cur.version, cur.version + 1
    text = dumps(new.definition, "pipeline definition")
    first = dumps(cur.definition, "pipeline definition")
    ctx.exec("pipelines.add_version", (pid, old_v, first, "{}", cur.created_at_ms))
    ctx.exec("pipelines.add_version", (pid, new_v, text, _canonical(d.moves), ctx.now))
    changed = ctx.exec(
        "pipelines.set_current", {"definition": text, "new": new_v, "pipeline": pid, "old": old_v}
    ).rowcount
    if changed != 1:
        raise Conflict(
            f"pipeline {cur.name!r} changed while this apply ran: run it again",
            code="pipeline_changed",
        )
    ctx.exec("pipelines.pin_leased", {"old": old_v, "pipeline": pid})
    ctx.exec("pipelines.add_forward", (pid,))
    for old, to in d.moves.items():
        where = {"pipeline": pid, "from": old, "to": to}
        ctx.exec(
            "pipelines.move_stage",
            {
                **where,
                "role": new.role_of(to),
                "terminal": int(new.is_terminal(to)),
                "version": new_v,
                "now": ctx.now,
            },
        )
        ctx.exec("pipelines.move_dead_letter_from", where)
        ctx.exec("pipelines.move_dead_letter_stage", where)
    for stage in new.states:
        if stage in d.counts:
            ctx.exec(
                "pipelines.restage",
                {
                    "role": new.role_of(stage),
                    "terminal": int(new.is_terminal(stage)),
                    "version": new_v,
                    "pipeline": pid,
                    "stage": stage,
                },
            )
    before = ctx.opts.retry.merged(cur.retry)
    after = ctx.opts.retry.merged(new.retry)
    for field, statement in _RETRY_FIELDS.items():
        old_value, new_value = getattr(before, field), getattr(after, field)
        if old_value != new_value:
            ctx.exec(statement, {"new": new_value, "old": old_value, "pipeline": pid})
