-- wait: what wait_for_work reads (rules/rail.py).

-- The earliest live lease expiry (the partial index tasks_leased answers it; the `> 0` lets it
-- under a generic plan too, instead of a scan of every task kept): an idle worker wakes when it
-- lapses, to reclaim the task.
-- name: wait.next_expiry
SELECT min(lease_expires_at_ms) FROM tasks
WHERE lease_expires_at_ms > 0 AND lease_expires_at_ms > %s;
