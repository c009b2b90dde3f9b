-- tasks_cap: a create's backlog cap (rules/tasks.py): a row (the role's exact depth) only when
-- adding :n tasks would pass :cap. The decision counts at most the rows that decide (LIMIT
-- :cap - :n + 1); the exact depth is counted only for a refusal.

-- name: tasks_cap.check
SELECT (SELECT count(*) FROM tasks WHERE role = :role AND dead_letter_reason IS NULL
        AND terminal = 0 AND lease_expires_at_ms <= :now)
WHERE (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE role = :role
       AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= :now
       LIMIT max(:cap - :n + 1, 0))) + :n > :cap;
