"""Which trigger a successful run sends, and where it came from (for the log and the error).

A role may serve several pipelines whose stages are left by different triggers, so the trigger
of an outcome that names none depends on the task's pipeline and stage. First that applies:

1. the executor names one (a ``command``'s ``exit_codes`` entry or ``outcome.json``, a Python
   executor's ``Transition("approve")``): always sent as it is;
2. the role's ``[roles.triggers]`` entry ``"<pipeline>.<stage>"``, then ``"<pipeline>"``
   (pipelines by name);
3. the stage's only trigger in its pipeline's definition (a stage with one way out);
4. the role's ``default_trigger``;
5. ``complete``, when the stage has it or its definition could not be read.

Otherwise nothing is sent and the run fails with reason ``invalid_trigger``, naming the stage's
triggers. A trigger the tracker refuses fails the same way, naming where it came from.

Definitions come from ``get_pipeline``, once per pipeline id and :class:`PipelineBook` (one per
role's run settings, so per worker and role; runs starting together share one request). A
pipeline changes only by ``pipeline apply`` (a new version, docs/operate/pipelines.md): a task
in a stage the cached definition lacks (one the apply added) has its definition read again, and
so has one whose chosen trigger the rail refuses (the ways out of an existing stage changed):
the trigger is then chosen once more from the newer definition.

It may touch the tracker's ``get_pipeline`` only (with the read retry of :mod:`worker.retry`, once
per pipeline) and the role's configuration; sending the trigger is :mod:`worker.run.report`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import anyio

from plugins.api import Failure, NamedTrigger, Transition
from tracker_client.errors import TrackerError, TrackerUnavailable
from tracker_client.models import Pipeline, Task
from tracker_client.protocol import LeaseTracker
from worker.config.models import RoleConfig
from worker.retry import RetryPolicy, call_with_retry

__all__ = [
    "FALLBACK_TRIGGER",
    "PipelineBook",
    "PipelineWays",
    "TriggerChoice",
    "choose_trigger",
    "sent_trigger_problems",
    "trigger_problems",
    "unworked_role_problems",
]

log = logging.getLogger("backlog_worker.worker")

#: The trigger of last resort (the one the role's ``default_trigger`` used to default to).
FALLBACK_TRIGGER = "complete"


class PipelineWays(NamedTuple):
    """A pipeline's name and, per stage, its outgoing triggers (definition order, no repeats)."""

    id: str
    name: str
    ways: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, pipeline_id: str, name: str, definition: Mapping[str, Any]) -> PipelineWays:
        """Read the ways out of every stage from a definition's ``transitions``."""
        ways: dict[str, list[str]] = {}
        transitions = definition.get("transitions")
        for t in transitions if isinstance(transitions, list) else ():
            if not isinstance(t, Mapping):
                continue
            src, trigger = t.get("from"), t.get("trigger")
            if isinstance(src, str) and isinstance(trigger, str):
                out = ways.setdefault(src, [])
                if trigger not in out:  # a repeated (from, trigger): the first one wins
                    out.append(trigger)
        return cls(pipeline_id, name, {stage: tuple(t) for stage, t in ways.items()})


class _Flight:
    """One ``get_pipeline`` in flight: the callers that arrive meanwhile wait for its answer."""

    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: PipelineWays | None = None
        #: The error that answers every waiter (a cancelled fetch leaves None: a waiter retries).
        self.error: Exception | None = None


class PipelineBook:
    """Pipeline definitions by id, each fetched once (until :meth:`forget`).

    Single-flight: when several runs of one pipeline start at once, the first asks the tracker
    and the others await its answer (one ``GET /pipelines/{id}``, not one per run). An error
    answers every waiter and is not cached (the next call asks again); a fetch cancelled with
    its run (its lease lost, the worker stopping) hands the question to one of the waiters.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, PipelineWays] = {}
        self._flights: dict[str, _Flight] = {}
        # (pipeline id, stage) -> (role, the trigger chosen for its outcomes naming none)
        self._choices: dict[tuple[str, str], tuple[RoleConfig, TriggerChoice]] = {}

    def cached(self, pipeline_id: str) -> PipelineWays | None:
        """The pipeline if it was fetched already."""
        return self._by_id.get(pipeline_id)

    def forget(self, pipeline_id: str) -> None:
        """Drop the cached definition: the next :meth:`get` reads it again (a newer version)."""
        self._by_id.pop(pipeline_id, None)
        self._choices.clear()

    def choice(self, outcome: Transition, role: RoleConfig, task: Task) -> TriggerChoice | None:
        """The trigger :func:`choose_trigger` chose before for an outcome naming none, of
        ``role`` at the task's pipeline and stage (the same definition and role choose the
        same), or None: choose it. Most runs of a role end at one stage with no trigger named:
        one choice, not one per run."""
        if outcome.trigger:
            return None
        known = self._choices.get((task.pipeline_id, task.stage))
        return known[1] if known is not None and known[0] is role else None

    def _remember(
        self, role: RoleConfig, task: Task, pipeline: PipelineWays, choice: TriggerChoice
    ) -> TriggerChoice:
        # Not kept: no trigger (the refusal names the executor), or a stage the definition
        # lacks (each run reads it again: a newer version may have added the stage).
        if choice.trigger is not None and task.stage in pipeline.ways:
            self._choices[(task.pipeline_id, task.stage)] = (role, choice)
        return choice

    async def get(
        self, tracker: LeaseTracker, pipeline_id: str, *, policy: RetryPolicy, budget_s: float
    ) -> PipelineWays:
        """The pipeline, fetched on the first call (``TrackerUnavailable`` retried)."""
        while True:
            hit = self._by_id.get(pipeline_id)
            if hit is not None:
                return hit
            flight = self._flights.get(pipeline_id)
            if flight is None:
                return await self._fetch(tracker, pipeline_id, policy, budget_s)
            await flight.done.wait()
            if flight.error is not None:
                raise flight.error
            if flight.result is not None:
                return flight.result
            # The fetch was cancelled: ask again (this caller may become the one asking).

    async def _fetch(
        self, tracker: LeaseTracker, pipeline_id: str, policy: RetryPolicy, budget_s: float
    ) -> PipelineWays:
        flight = self._flights[pipeline_id] = _Flight()
        try:
            p = await call_with_retry(
                lambda: tracker.get_pipeline(pipeline_id),
                policy=policy,
                budget_s=budget_s,
                action="get_pipeline",
            )
            hit = self._by_id[pipeline_id] = PipelineWays.of(p.id, p.name, p.definition)
            flight.result = hit
            return hit
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[pipeline_id]
            flight.done.set()


class TriggerChoice(NamedTuple):
    """The trigger to send (None: none could be chosen) and where it came from."""

    trigger: str | None
    source: str
    #: The stage's triggers, when its definition was read.
    allowed: tuple[str, ...] | None = None
    pipeline: str | None = None

    def failure(
        self, role: RoleConfig, stage: str, usage: Any, *, refused: list[str] | None = None
    ) -> Failure:
        """The run's failure (not retried: the same outcome would fail again) when no trigger
        could be chosen, or the tracker ``refused`` this one (with the triggers it allows)."""
        where = f"stage {stage!r}" + (f" of pipeline {self.pipeline!r}" if self.pipeline else "")
        if refused is not None:
            message = (
                f"trigger {self.trigger!r} ({self.source}) is not allowed from {where}; "
                f"allowed triggers: {', '.join(refused) or 'none'}"
            )
            details = {"trigger": self.trigger, "source": self.source, "allowed": refused}
        else:
            ways = self.allowed or ()
            message = (
                f"no trigger for {where}: {self.source}, and the stage has {len(ways)} ways out "
                f"({', '.join(ways)}); name one in role {role.name}'s [roles.triggers] "
                f'("{self.pipeline}.{stage}" = "{ways[0] if ways else FALLBACK_TRIGGER}"), '
                "its default_trigger, or the executor (e.g. a command's exit_codes)"
            )
            details = {"source": self.source, "allowed": list(ways)}
        return Failure(
            reason="invalid_trigger", message=message, retryable=False, details=details, usage=usage
        )


def _executor_source(outcome: Transition, role: RoleConfig) -> str:
    return outcome.source or f"the {role.executor} executor of role {role.name}"


#: Where a trigger came from when the pipeline's definition (or nothing) chose it.
_ONLY_WAY = "the only way out of the stage"
_BUILT_IN = "the built-in default"
_FROM_DEFINITION = frozenset({_ONLY_WAY, _BUILT_IN})
_ONLY_WAY_IN_VERSION = "the only way out of the stage in the task's version of the pipeline"


async def choose_trigger(
    outcome: Transition,
    role: RoleConfig,
    task: Task,
    tracker: LeaseTracker,
    book: PipelineBook,
    *,
    policy: RetryPolicy,
    budget_s: float,
) -> TriggerChoice:
    """The trigger of ``outcome`` for ``task`` (see the module's precedence).

    A pipeline that cannot be read (not found, refused) leaves the role's ``default_trigger`` or
    ``complete``, with a warning; an unreachable tracker raises ``TrackerUnavailable`` (the
    transition could not be sent either).
    """
    explicit = outcome.trigger
    try:  # for an explicit trigger, only to name the pipeline in an error: one try, no more
        pipeline: PipelineWays | None = await book.get(
            tracker, task.pipeline_id, policy=policy, budget_s=0.0 if explicit else budget_s
        )
    except TrackerUnavailable:
        if not explicit:
            raise
        pipeline = None
    except TrackerError as exc:
        if not explicit:
            log.warning(
                "pipeline %s cannot be read (%s): its stages' triggers are unknown",
                task.pipeline_id,
                exc,
                extra={"action": "pipeline_unreadable", "task_id": task.id},
            )
        pipeline = None
    if pipeline is not None and not explicit and task.stage not in pipeline.ways:
        # A stage added by a newer version of the pipeline (pipeline apply): read it again.
        book.forget(task.pipeline_id)
        pipeline = await book.get(tracker, task.pipeline_id, policy=policy, budget_s=budget_s)
    if explicit:
        name = None if pipeline is None else pipeline.name
        ways = None if pipeline is None else pipeline.ways.get(task.stage, ())
        return TriggerChoice(explicit, _executor_source(outcome, role), ways, name)
    if pipeline is None:
        if role.default_trigger:
            return TriggerChoice(role.default_trigger, f"role {role.name}'s default_trigger")
        return TriggerChoice(FALLBACK_TRIGGER, _BUILT_IN)
    return book._remember(role, task, pipeline, _from_definition(outcome, role, task, pipeline))


def _from_definition(
    outcome: Transition, role: RoleConfig, task: Task, pipeline: PipelineWays
) -> TriggerChoice:
    """The trigger for an outcome naming none, by the role's overrides and the definition."""
    name, stage = pipeline.name, task.stage
    ways = pipeline.ways.get(stage, ())
    for key in (f"{name}.{stage}", name):
        mapped = role.triggers.get(key)
        if mapped:
            return TriggerChoice(
                mapped, f"pipeline override {key!r} of role {role.name}", ways, name
            )
    if len(ways) == 1:
        return TriggerChoice(ways[0], _ONLY_WAY, ways, name)
    if role.default_trigger:
        source = f"role {role.name}'s default_trigger"
        return TriggerChoice(role.default_trigger, source, ways, name)
    if FALLBACK_TRIGGER in ways or not ways:
        return TriggerChoice(FALLBACK_TRIGGER, _BUILT_IN, ways, name)
    return TriggerChoice(None, _executor_source(outcome, role) + " names no trigger", ways, name)


async def choose_again(
    refused: TriggerChoice,
    allowed: Sequence[str],
    outcome: Transition,
    role: RoleConfig,
    task: Task,
    tracker: LeaseTracker,
    book: PipelineBook,
    *,
    policy: RetryPolicy,
    budget_s: float,
) -> TriggerChoice | None:
    """After the rail refused ``refused`` (``InvalidTransition``, naming the ``allowed``
    triggers when it knows them): another trigger to send, or None.

    A ``pipeline apply`` may have changed the ways out of the task's stage (docs/operate/
    pipelines.md), and the rail judges a task by its own version: a waiting task by the newest,
    a running one by the version it was claimed under. So the definition is read again and the
    trigger chosen once more; when that gives nothing the rail allows, and the refused trigger
    came from the definition itself (not from the role's settings), the stage's only allowed way
    out in the task's version is taken. A trigger the executor named is its own: never changed.
    """
    if outcome.trigger:
        return None
    book.forget(task.pipeline_id)
    again = await choose_trigger(
        outcome, role, task, tracker, book, policy=policy, budget_s=budget_s
    )
    fits = again.trigger is not None and (not allowed or again.trigger in allowed)
    if fits and again.trigger != refused.trigger:
        return again
    if refused.source in _FROM_DEFINITION and len(allowed) == 1 and allowed[0] != refused.trigger:
        return TriggerChoice(allowed[0], _ONLY_WAY_IN_VERSION, tuple(allowed), again.pipeline)
    return None


def trigger_problems(roles: Sequence[RoleConfig], pipelines: Sequence[Pipeline]) -> list[str]:
    """What ``backlog-worker check`` warns about each role's ``[roles.triggers]``: an entry that
    names no stage of the role in the rail's pipelines (a misspelling would never apply), or a
    trigger one of the stages it names has no transition for (the tracker would refuse it)."""
    problems: list[str] = []
    for role in roles:
        for key, trigger in role.triggers.items():
            entry = f"role {role.name}: [roles.triggers] {key!r}"
            stages = [
                (p.name, stage, ways)
                for p in pipelines
                for stage, ways in _role_stages(p, role.name)
                if key in (p.name, f"{p.name}.{stage}")
            ]
            if not stages:
                problems.append(f"{entry} names no stage of role {role.name} in any pipeline")
            problems.extend(
                f"{entry} = {trigger!r}: stage {stage!r} of pipeline {name!r} has no such trigger "
                f"(it has: {', '.join(ways) or 'none'})"
                for name, stage, ways in stages
                if trigger not in ways
            )
    return problems


def unworked_role_problems(roles: Sequence[RoleConfig], pipelines: Sequence[Pipeline]) -> list[str]:
    """What ``backlog-worker check`` warns about a role no stage of the rail's pipelines names
    as its ``agent_role``: a worker serving only it would claim nothing and wait in silence (a
    misspelt role name, or a pipeline not created yet)."""
    problems: list[str] = []
    on_rail = sorted(
        {role for p in pipelines for role in _stage_roles(p).values() if isinstance(role, str)}
    )
    for role in roles:
        if role.name in on_rail:
            continue
        import difflib  # an error's path only (issue 31, memory)

        close = difflib.get_close_matches(role.name, on_rail, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        problems.append(
            f"role {role.name}: no stage of any pipeline on the rail has agent_role "
            f"{role.name!r}, so it would claim nothing (roles of the rail's stages: "
            f"{', '.join(on_rail) or 'none'}){hint}"
        )
    return problems


#: How bad a problem is, as ``backlog-worker check`` reports it.
Level = Literal["warn", "fail"]

#: A role's stage: (pipeline name, stage, its triggers).
_Stage = tuple[str, str, tuple[str, ...]]


def _has(stages: Sequence[_Stage]) -> str:
    return "; ".join(
        f"stage {stage!r} of pipeline {name!r} has {', '.join(ways) or 'none'}"
        for name, stage, ways in stages
    )


def _held(
    role: RoleConfig, named: NamedTrigger, stages: Sequence[_Stage]
) -> tuple[Level, str] | None:
    """(level, text) when ``named`` is not a way out of every stage it may be sent from."""
    missing = [s for s in stages if named.trigger not in s[2]]
    if not missing:
        return None
    entry = f"role {role.name}: {named.source} sends trigger {named.trigger!r}"
    if len(missing) < len(stages):  # right for some stages: meant for one pipeline, perhaps
        return "warn", f"{entry}, which {_has(missing)} instead (a run there would fail)"
    valid = sorted({w for _, _, ways in stages for w in ways})
    import difflib  # an error's path only (issue 31, memory)

    close = difflib.get_close_matches(named.trigger, valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return "fail", f"{entry}, which no stage it works on has ({_has(stages)}){hint}"


def sent_trigger_problems(
    role: RoleConfig, sent: Sequence[NamedTrigger], pipelines: Sequence[Pipeline]
) -> list[tuple[Level, str]]:
    """What ``backlog-worker check`` says, as ``(level, text)``, about each trigger ``role`` can
    send: its executor's (``sent``, :class:`plugins.api.SupportsTriggers`: sent from every stage
    of the role) and its ``default_trigger`` (sent from a stage with several ways out that no
    ``[roles.triggers]`` entry covers). ``fail``: no stage it is sent from has it, so every run
    would end ``invalid_trigger`` (with a "did you mean"); ``warn``: some of them lack it. A
    role no pipeline gives a stage yet is not judged (its pipelines may come later)."""
    stages = [
        (p.name, stage, ways) for p in pipelines for stage, ways in _role_stages(p, role.name)
    ]
    if not stages:
        return []
    problems = [_held(role, named, stages) for named in sent]
    if role.default_trigger:
        chosen = [
            (name, stage, ways)
            for name, stage, ways in stages
            if len(ways) > 1
            and f"{name}.{stage}" not in role.triggers
            and name not in role.triggers
        ]
        if chosen:
            named = NamedTrigger(role.default_trigger, "default_trigger")
            problems.append(_held(role, named, chosen))
    return [p for p in problems if p is not None]


def _stage_roles(pipeline: Pipeline) -> dict[str, object]:
    """Each stage of ``pipeline``'s definition and the ``agent_role`` it names (None where it
    names none); a definition without ``states`` has none."""
    states = pipeline.definition.get("states")
    if not isinstance(states, Mapping):
        return {}
    return {
        stage: state.get("agent_role")
        for stage, state in states.items()
        if isinstance(state, Mapping)
    }


def _role_stages(pipeline: Pipeline, role: str) -> list[tuple[str, tuple[str, ...]]]:
    stages = [stage for stage, named in _stage_roles(pipeline).items() if named == role]
    if not stages:
        return []
    ways = PipelineWays.of(pipeline.id, pipeline.name, pipeline.definition).ways
    return [(stage, ways.get(stage, ())) for stage in stages]
