-- wait: what wait_for_work reads (rules/rail.py).

-- The earliest live lease expiry (the partial index tasks_leased answers it in O(log n)): an
-- idle worker wakes when it lapses, to reclaim the task.
-- name: wait.next_expiry
SELECT min(lease_expires_at_ms) FROM tasks WHERE lease_expires_at_ms > ?;
