-- wake: the cross-process wake counter of the SQLite engine (embedded/engine.py; PostgreSQL
-- wakes other hosts by NOTIFY instead).

-- Bumped inside every write that wakes waiters (rules/engine.py `wakes_waiters`).
-- name: wake.bump
-- only: sqlite
INSERT INTO wakes (id, n) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1;

-- What a waiter compares, with data_version, after another connection's commit.
-- name: wake.count
-- only: sqlite
SELECT coalesce((SELECT n FROM wakes WHERE id = 1), 0);
