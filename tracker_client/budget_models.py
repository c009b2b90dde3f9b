"""What a task's budgets look like to a reader (docs/operate/budgets.md): the limits in force,
what the task has used against each, and the figures of the budget that stopped it.

Budgets bound an agent loop: ``max_loops`` (re-entries of one stage), ``max_runs`` (runs across
all stages), ``max_cost`` (USD the runs reported) and ``max_tokens`` (tokens they reported). The
rail enforces them (:mod:`tracker_client.rules.budgets`); ``task show``, the dashboard and the
producer API read this model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BudgetStatus"]


class BudgetStatus(BaseModel):
    """A task's budgets and use (extension ``budgets``; None on a rail without it)."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    #: The limits in force: the task's own over its pipeline's over the rail's defaults
    #: (``max_loops`` 10); None: no cap.
    max_loops: int | None = None
    max_runs: int | None = None
    max_cost: float | None = None
    max_tokens: int | None = None
    #: Runs counted against ``max_runs`` (since the last requeue).
    runs: int = 0
    #: Re-entries per stage counted against ``max_loops`` (stages on a loop that were entered).
    loops: dict[str, int] = Field(default_factory=dict)
    #: Cost reported since the last requeue (USD, tokens): what the caps compare.
    spent_usd: float = 0.0
    spent_tokens: int = 0
    #: Cost reported over the task's whole life (a requeue does not forget money spent).
    total_usd: float = 0.0
    total_tokens: int = 0
    #: The figures of the budget that dead-lettered it (``loops 3 of 3 in stage review``), when
    #: its dead-letter reason is ``budget_exceeded``; else None.
    exceeded: str | None = None

    def rows(self) -> list[tuple[str, str]]:
        """The figures as (label, text) rows, as ``task show`` and the dashboard print them:
        each use against its cap (``runs 4 of 10``), the spend and which budget stopped it."""

        def of(used: str, cap: str | None) -> str:
            return f"{used} (no cap)" if cap is None else f"{used} of {cap}"

        looped = ", ".join(f"{stage} {n}" for stage, n in self.loops.items() if n) or "none"
        cap = None if self.max_loops is None else f"{self.max_loops} per stage"
        usd = None if self.max_cost is None else f"{self.max_cost:.2f} USD"
        tokens = None if self.max_tokens is None else str(self.max_tokens)
        out = [
            ("loops", of(looped, cap)),
            ("runs", of(str(self.runs), None if self.max_runs is None else str(self.max_runs))),
            ("cost", of(f"{self.spent_usd:.2f} USD", usd)),
            ("tokens", of(str(self.spent_tokens), tokens)),
        ]
        if (self.total_usd, self.total_tokens) != (self.spent_usd, self.spent_tokens):
            out.append(("spent in all", f"{self.total_usd:.2f} USD, {self.total_tokens} tokens"))
        if self.exceeded:
            out.append(("exceeded", self.exceeded))
        return out
