"""Budgets for agent loops (docs/operate/budgets.md): how often a task may go round a loop of its
pipeline, how many runs it may take and how much cost its runs may report, enforced by the rail.

A reviewer agent that always rejects sends a task round its review loop forever, an unbounded
bill. Four budgets stop that, set per pipeline (its definition's ``budgets``) and per task (at
submit; a task's own value wins, key by key):

* ``max_loops``: times the task may *re-enter* one stage it has been in before (default
  :data:`DEFAULT_MAX_LOOPS`, so a loop is bounded even when nobody set anything; ``null``: no
  cap). Counted per stage, on the stages that lie on a loop of the pipeline (no other stage can
  be entered twice by a transition);
* ``max_runs``: runs in total across stages (no default);
* ``max_cost``: USD its runs reported (``ctx.report_cost(usd=...)``; no default);
* ``max_tokens``: tokens its runs reported (``ctx.report_cost(tokens=...)``; no default).

Cost rides with a run's report as ``usage["cost"] = {"usd": float, "tokens": int}`` (the worker
writes it); the rail adds it to the task's spend. A task past a budget is dead-lettered with
reason :data:`REASON` and the figures (``loops 3 of 3 in stage review``, ``cost 0.52 of 0.50
USD``): checked when a transition would re-enter a stage, and when a run ends with more work to
follow (a move to a stage that is not terminal, or a retry) but its runs or cost are used up. A
run that finishes the task is never thrown away for its cost: the spend is recorded and the task
is done. A requeue starts the count afresh (the total spend stays on record).

This module is the check, called with one call from the transition and fail rules
(:mod:`.runs`), the create rule (:mod:`.tasks`) and the requeue (:mod:`.backlog`). It touches
the budget columns of ``tasks`` and reads ``runs``, through statements ``budgets.*``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from tracker_client.errors import ValidationFailed
from tracker_client.rules.common import Ctx, dumps
from tracker_client.rules.pipelines import PipelineDef

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import BudgetStatus

__all__ = [
    "DEFAULT_MAX_LOOPS",
    "KEYS",
    "REASON",
    "Breach",
    "Limits",
    "check_fail",
    "check_move",
    "cost_of",
    "effective",
    "loop_stages",
    "one_trip_ok",
    "parse_limits",
    "restart",
    "status",
    "stopped",
    "store_task_limits",
]

#: The dead-letter reason of a task stopped by a budget.
REASON = "budget_exceeded"
#: Re-entries of one stage allowed when neither the task nor its pipeline sets ``max_loops``.
DEFAULT_MAX_LOOPS = 10
#: The budget keys, in the order they are checked and shown.
KEYS = ("max_loops", "max_runs", "max_cost", "max_tokens")
#: The key of a run's ``usage`` that carries its reported cost.
COST_KEY = "cost"

#: Budget values by key (only the keys given); None: explicitly no cap.
Limits = dict[str, int | float | None]

_WHAT = {
    "max_loops": "a whole number >= 0 (re-entries of one stage)",
    "max_runs": "a whole number >= 1 (runs in total)",
    "max_cost": "a number >= 0 (USD)",
    "max_tokens": "a whole number >= 0 (tokens)",
}


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return repr(value)


def parse_limits(raw: Any, where: str, fail: Callable[[str], Exception] | None = None) -> Limits:
    """``raw`` (a JSON object of budgets) checked: every key known, every value of its kind;
    else the error ``fail(message)`` builds (``ValidationFailed`` by default) naming the key,
    what it must be and what it got. ``null`` values stay (no cap, overriding a default)."""
    err: Callable[[str], Exception] = fail or (lambda m: ValidationFailed(m, code="invalid_budget"))
    if not isinstance(raw, Mapping):
        raise err(f"{where} must be an object of budgets ({', '.join(KEYS)}), got {_type(raw)}")
    out: Limits = {}
    for key, value in raw.items():
        if key not in KEYS:
            import difflib  # an error's path only (issue 31, memory)

            close = difflib.get_close_matches(str(key), KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise err(f"{where}: unknown budget {key!r}{hint}; known: {', '.join(KEYS)}")
        if value is None:
            out[key] = None
            continue
        whole = key != "max_cost"
        low = 1 if key == "max_runs" else 0
        ok = not isinstance(value, bool) and (
            isinstance(value, int) if whole else isinstance(value, int | float)
        )
        if ok and not whole:
            ok = math.isfinite(value)
        if not ok or value < low:
            raise err(f"{where}.{key} must be {_WHAT[key]} or null (no cap), got {_type(value)}")
        out[key] = float(value) if key == "max_cost" else int(value)
    return out


def effective(pipeline: Limits, task: Limits | None) -> dict[str, int | float | None]:
    """The limits in force: the task's own over its pipeline's over the defaults."""
    out: dict[str, int | float | None] = dict.fromkeys(KEYS)
    out["max_loops"] = DEFAULT_MAX_LOOPS
    out.update(pipeline)
    if task:
        out.update(task)
    return out


def cost_of(usage: Any) -> tuple[float, int] | None:
    """The cost a run's ``usage`` reports (``{"cost": {"usd": .., "tokens": ..}}``), or None;
    ``ValidationFailed`` naming the field when it is there but malformed."""
    if not isinstance(usage, Mapping) or COST_KEY not in usage:
        return None
    cost = usage[COST_KEY]
    if not isinstance(cost, Mapping):
        raise ValidationFailed(
            f"usage.cost must be an object {{usd, tokens}} (what ctx.report_cost reports), "
            f"got {_type(cost)}",
            code="invalid_cost",
        )
    unknown = [k for k in cost if k not in ("usd", "tokens")]
    if unknown:
        raise ValidationFailed(
            f"usage.cost: unknown key {unknown[0]!r}; known: usd, tokens", code="invalid_cost"
        )
    usd, tokens = cost.get("usd", 0), cost.get("tokens", 0)
    if (
        isinstance(usd, bool)
        or not isinstance(usd, int | float)
        or not math.isfinite(usd)
        or (usd < 0)
    ):
        raise ValidationFailed(
            f"usage.cost.usd must be a number >= 0, got {_type(usd)}", code="invalid_cost"
        )
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValidationFailed(
            f"usage.cost.tokens must be a whole number >= 0, got {_type(tokens)}",
            code="invalid_cost",
        )
    return float(usd), int(tokens)


#: Stages on a loop, by pipeline (the parsed pipelines are cached for the process's life).
_LOOPS: dict[int, tuple[PipelineDef, frozenset[str]]] = {}


def loop_stages(pipeline: PipelineDef) -> frozenset[str]:
    """The stages a task can enter twice: those on a cycle of the pipeline's transitions."""
    hit = _LOOPS.get(id(pipeline))
    if hit is not None and hit[0] is pipeline:
        return hit[1]
    nxt: dict[str, set[str]] = {}
    for t in pipeline.transitions:
        nxt.setdefault(t.from_state, set()).add(t.to_state)
    on_loop = set()
    for start in pipeline.states:
        seen: set[str] = set()
        todo = list(nxt.get(start, ()))
        while todo:
            s = todo.pop()
            if s == start:
                on_loop.add(start)
                break
            if s not in seen:
                seen.add(s)
                todo.extend(nxt.get(s, ()))
    found = frozenset(on_loop)
    if len(_LOOPS) > 4096:
        _LOOPS.clear()
    _LOOPS[id(pipeline)] = (pipeline, found)
    return found


class Breach(NamedTuple):
    """A budget a write would pass: which, its limit, what was used, where."""

    budget: str  # loops | runs | cost | tokens
    limit: int | float
    spent: int | float
    stage: str | None = None

    @property
    def summary(self) -> str:
        """``loops 3 of 3 in stage review``, ``runs 5 of 5``, ``cost 0.52 of 0.50 USD``."""
        if self.budget == "loops":
            return f"loops {self.spent} of {self.limit} in stage {self.stage}"
        if self.budget == "cost":
            return f"cost {self.spent:.2f} of {self.limit:.2f} USD"
        return f"{self.budget} {self.spent} of {self.limit}"

    def detail(self) -> dict[str, Any]:
        """The dead-letter event's figures."""
        out: dict[str, Any] = {"budget": self.budget, "limit": self.limit, "spent": self.spent}
        if self.stage is not None:
            out["stage"] = self.stage
        out["budget_exceeded"] = self.summary
        return out


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None  # a damaged counter restarts rather than blocking the task


def _task_limits(text: Any) -> Limits | None:
    value = _json(text)
    return value if isinstance(value, dict) else None


def store_task_limits(ctx: Ctx, task_id: str, limits: Limits | None) -> None:
    """Keep a new task's own budgets (``limits`` checked by :func:`parse_limits`)."""
    if limits:
        ctx.exec("budgets.set_task", (dumps(limits, "budgets"), task_id))


def _base(state: Any) -> tuple[int, float, int]:
    base = _json(state["budget_base"])
    if not isinstance(base, dict):
        return 0, 0.0, 0
    return int(base.get("at_ms") or 0), float(base.get("usd") or 0), int(base.get("tokens") or 0)


def _spend(
    ctx: Ctx, task: Any, state: Any, cost: tuple[float, int] | None, limits: Mapping[str, Any]
) -> Breach | None:
    """Add the run's cost to the task's; the cost budget it passes, if any."""
    if cost is None:
        return None
    usd, tokens = cost
    if usd or tokens:
        ctx.exec("budgets.spend", (usd, tokens, task["seq"]))
    _at, base_usd, base_tokens = _base(state)
    spent_usd = float(state["spent_usd"]) + usd - base_usd
    spent_tokens = int(state["spent_tokens"]) + tokens - base_tokens
    cap_usd, cap_tokens = limits["max_cost"], limits["max_tokens"]
    if cap_usd is not None and spent_usd > cap_usd + 1e-9:
        return Breach("cost", cap_usd, round(spent_usd, 6))
    if cap_tokens is not None and spent_tokens > cap_tokens:
        return Breach("tokens", cap_tokens, spent_tokens)
    return None


def _runs(ctx: Ctx, task: Any, state: Any, limits: Mapping[str, Any]) -> Breach | None:
    """The runs budget when used up (the run ending now counted)."""
    cap = limits["max_runs"]
    if cap is None:
        return None
    at, _usd, _tokens = _base(state)
    n = int(ctx.scalar("budgets.runs", (task["id"], at)))
    return Breach("runs", cap, n) if n >= cap else None


def check_move(
    ctx: Ctx, task: Any, pipeline: PipelineDef, stage: str, to: str, usage: Any
) -> Breach | None:
    """A run's transition from ``stage`` to ``to``: record its cost and, when ``to`` is on a
    loop, the entry; the budget it passes (the caller dead-letters the task instead of moving
    it), or None. ``task``: the lease's row (``seq``, ``id``, ``budgets``)."""
    cost = cost_of(usage)
    loops = loop_stages(pipeline)
    limits = effective(pipeline.budgets, _task_limits(task["budgets"]))
    more = not pipeline.is_terminal(to)
    loop = to in loops
    if cost is None and not loop and not (more and limits["max_runs"] is not None):
        return None  # the common case: nothing to count, nothing read
    state = ctx.one("budgets.state", (task["seq"],))
    assert state is not None  # the lease's row
    breach = _spend(ctx, task, state, cost, limits)
    if not more:
        breach = None  # the task is done: its spend is recorded, nothing more to stop
    elif breach is None:
        breach = _runs(ctx, task, state, limits)
    if loop:
        visits = _json(state["visits"])
        visits = visits if isinstance(visits, dict) else {}
        if stage in loops:
            visits.setdefault(stage, 1)  # entered once (at creation or requeue) if unrecorded
        entries = int(visits.get(to, 0)) + 1
        cap = limits["max_loops"]
        if cap is not None and entries - 1 > cap:
            return Breach("loops", cap, entries - 2, to)  # the loop is the reason to name
        if breach is None:  # counted only when the task does move
            visits[to] = entries
            ctx.exec("budgets.visit", (dumps(visits, "visits"), task["seq"]))
    return breach


def check_fail(
    ctx: Ctx, task: Any, pipeline: PipelineDef, usage: Any, retrying: bool
) -> Breach | None:
    """A run's fail: record its cost; when the task would be retried, the budget (runs, cost)
    its retry would pass, or None."""
    cost = cost_of(usage)
    limits = effective(pipeline.budgets, _task_limits(task["budgets"]))
    if cost is None and not (retrying and limits["max_runs"] is not None):
        return None
    state = ctx.one("budgets.state", (task["seq"],))
    assert state is not None
    breach = _spend(ctx, task, state, cost, limits)
    if not retrying:
        return None
    return breach or _runs(ctx, task, state, limits)


def stopped(ctx: Ctx, task: Any, breach: Breach) -> None:
    """Record the figures of the budget that stops the task (shown by ``task show``)."""
    ctx.exec("budgets.stop", (breach.summary, task["seq"]))


def restart(ctx: Ctx, seq: int) -> None:
    """A requeue: count loops, runs and spend afresh from now (the total spend stays)."""
    ctx.exec("budgets.restart", {"now": ctx.now, "seq": seq})


def one_trip_ok(pipeline: PipelineDef, stage: str, to: str, usage: Any) -> bool:
    """Whether a transition of a task without budgets of its own needs no budget check: the
    PostgreSQL one-round-trip path (which writes without this module) takes only those."""
    if isinstance(usage, Mapping) and COST_KEY in usage:
        return False
    if to in loop_stages(pipeline):
        return False
    return pipeline.is_terminal(to) or pipeline.budgets.get("max_runs") is None


def status(ctx: Ctx, row: Any, pipeline: PipelineDef) -> BudgetStatus:
    """A task's budgets and their use, for ``task show`` and the dashboard (``row``: its
    ``tasks`` row)."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import BudgetStatus

    limits = effective(pipeline.budgets, _task_limits(row["budgets"]))
    at, base_usd, base_tokens = _base(row)
    visits = _json(row["visits"])
    loops = (
        {str(s): max(0, int(n) - 1) for s, n in visits.items() if isinstance(n, int)}
        if isinstance(visits, dict)
        else {}
    )
    total_usd, total_tokens = float(row["spent_usd"]), int(row["spent_tokens"])
    return BudgetStatus(
        max_loops=limits["max_loops"],
        max_runs=limits["max_runs"],
        max_cost=limits["max_cost"],
        max_tokens=limits["max_tokens"],
        runs=int(ctx.scalar("budgets.runs", (row["id"], at))),
        loops=loops,
        spent_usd=round(total_usd - base_usd, 6),
        spent_tokens=total_tokens - base_tokens,
        total_usd=round(total_usd, 6),
        total_tokens=total_tokens,
        exceeded=row["budget_stop"] if row["dead_letter_reason"] == REASON else None,
    )
