-- tasks_cap: a create's backlog cap (rules/tasks.py). On PostgreSQL the server checks it:
-- bw_backlog_check (schema 18) counts at most the rows that decide and raises SQLSTATE BW002
-- (the rail's BacklogFull, with the exact depth) when the cap would be passed. Nobody reads its
-- answer, so it travels with the insert and the COMMIT: a create is one round trip.

-- name: tasks_cap.check
-- deferred
SELECT bw_backlog_check(%(role)s, %(now)s, %(n)s, %(cap)s);
