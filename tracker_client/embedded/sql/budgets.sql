-- budgets: the loop, run and cost budgets of agent loops (rules/budgets.py,
-- docs/operate/budgets.md).

-- A task's own budget settings, stored at creation when given.
-- name: budgets.set_task
UPDATE tasks SET budgets = ? WHERE id = ?;

-- What a budget check reads of a task (only when one applies to the write).
-- name: budgets.state
SELECT budgets, spent_usd, spent_tokens, visits, budget_base, budget_stop FROM tasks
WHERE seq = ?;

-- The cost a run reported, added to its task's.
-- name: budgets.spend
UPDATE tasks SET spent_usd = spent_usd + ?, spent_tokens = spent_tokens + ? WHERE seq = ?;

-- The task's entries into the stages on a loop.
-- name: budgets.visit
UPDATE tasks SET visits = ? WHERE seq = ?;

-- The figures of the budget that stopped the task.
-- name: budgets.stop
UPDATE tasks SET budget_stop = ? WHERE seq = ?;

-- Runs counted against max_runs: those started since the count began (a released run, given
-- back by a worker shutting down, is not the task's doing).
-- name: budgets.runs
SELECT count(*) FROM runs WHERE task_id = ? AND started_at_ms >= ? AND status <> 'released';

-- A requeue starts the count afresh: loops, runs and spend from now on.
-- name: budgets.restart
UPDATE tasks SET visits = NULL, budget_stop = NULL,
    budget_base = json_object('at_ms', :now, 'usd', spent_usd, 'tokens', spent_tokens)
WHERE seq = :seq;

