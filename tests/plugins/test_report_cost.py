"""``ctx.report_cost`` (docs/operate/budgets.md): figures add up over a run and ride with its
report as ``usage["cost"]``; a bad figure is a ``ValueError`` naming it."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.api import ExecutionContext, Failure, Outcome, Transition
from plugins.testing import ExecutorHarness

pytestmark = pytest.mark.anyio


class Spends:
    """Reports cost twice, then answers ``outcome``."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        ctx.report_cost(usd=0.25, tokens=1000)
        ctx.report_cost(usd=0.5)
        ctx.report_cost(tokens=24)
        return self.outcome


async def test_reported_cost_adds_up_into_the_runs_usage() -> None:
    outcome = await ExecutorHarness().run(Spends(Transition("done", usage={"model": "m"})))
    assert outcome == Transition(
        "done", usage={"model": "m", "cost": {"usd": 0.75, "tokens": 1024}}
    )


async def test_a_failure_carries_its_cost_too_and_plain_usage_is_kept() -> None:
    outcome = await ExecutorHarness().run(Spends(Failure("boom", usage=[1, 2])))
    assert isinstance(outcome, Failure)
    assert outcome.usage == {"usage": [1, 2], "cost": {"usd": 0.75, "tokens": 1024}}


async def test_no_report_leaves_the_outcome_as_it_was() -> None:
    class Quiet:
        async def execute(self, ctx: ExecutionContext) -> Outcome:
            return Transition("done")

    assert await ExecutorHarness().run(Quiet()) == Transition("done")


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"usd": -0.1}, "usd must be >= 0, got -0.1"),
        ({"usd": "0.10"}, "usd must be a number of US dollars, got '0.10'"),
        ({"usd": float("nan")}, "usd must be a number of US dollars, got nan"),
        ({"usd": True}, "usd must be a number of US dollars, got True"),
        ({"tokens": -5}, "tokens must be >= 0, got -5"),
        ({"tokens": 1.5}, "tokens must be a whole number, got 1.5"),
    ],
)
async def test_a_bad_figure_is_refused_naming_it(kwargs: dict[str, Any], words: str) -> None:
    seen: list[str] = []

    class Bad:
        async def execute(self, ctx: ExecutionContext) -> Outcome:
            with pytest.raises(ValueError, match=r"ctx\.report_cost") as err:
                ctx.report_cost(**kwargs)
            seen.append(str(err.value))
            return Transition("done")

    assert await ExecutorHarness().run(Bad()) == Transition("done")  # nothing counted
    assert words in seen[0]
