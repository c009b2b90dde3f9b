-- budgets: the loop, run and cost budgets of agent loops (rules/budgets.py,
-- docs/operate/budgets.md).

-- A task's own budget settings, stored at creation when given.
-- name: budgets.set_task
UPDATE tasks SET budgets = %s WHERE id = %s;

-- What a budget check reads of a task (only when one applies to the write).
-- name: budgets.state
SELECT budgets, spent_usd, spent_tokens, visits, budget_base, budget_stop FROM tasks
WHERE seq = %s;

-- The cost a run reported, added to its task's (its row is locked by the lease read).
-- name: budgets.spend
-- shared
-- deferred
UPDATE tasks SET spent_usd = spent_usd + %s, spent_tokens = spent_tokens + %s WHERE seq = %s;

-- The task's entries into the stages on a loop (its row is locked by the lease read).
-- name: budgets.visit
-- shared
-- deferred
UPDATE tasks SET visits = %s WHERE seq = %s;

-- The figures of the budget that stopped the task.
-- name: budgets.stop
UPDATE tasks SET budget_stop = %s WHERE seq = %s;

-- Runs counted against max_runs: those started since the count began (a released run, given
-- back by a worker shutting down, is not the task's doing).
-- name: budgets.runs
SELECT count(*) FROM runs WHERE task_id = %s AND started_at_ms >= %s AND status <> 'released';

-- A requeue starts the count afresh: loops, runs and spend from now on.
-- name: budgets.restart
UPDATE tasks SET visits = NULL, budget_stop = NULL,
    budget_base = json_build_object('at_ms', %(now)s::bigint, 'usd', spent_usd,
        'tokens', spent_tokens)::text
WHERE seq = %(seq)s;

