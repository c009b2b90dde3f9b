-- follow: a task's state beside its events (rules/follow.py), and the follow channel's
-- interest rows (postgres/follow.py).

-- name: follow.state
SELECT stage, pipeline_id, dead_letter_reason FROM tasks WHERE id = %s;

-- This instance follows tasks until :expires (seconds from now, on the server's clock); run
-- on the raw connection (no rule is involved, so the write lock's shared mode does not apply).
-- name: follow.interest
-- only: postgres
INSERT INTO followers (instance, expires_at)
VALUES (%s, clock_timestamp() + make_interval(secs => %s))
ON CONFLICT (instance) DO UPDATE SET
    expires_at = GREATEST(followers.expires_at, EXCLUDED.expires_at);

-- name: follow.forget_stale
-- only: postgres
DELETE FROM followers WHERE expires_at < clock_timestamp() - interval '1 hour';

-- name: follow.forget_instance
-- only: postgres
DELETE FROM followers WHERE instance = %s;

-- Run by a write right before its COMMIT: the follow channel's NOTIFY, sent only while a live
-- followers row exists. A template: {channel} and {instance} are bound once per
-- tracker instance as literals quoted by psycopg.sql.Literal (postgres/follow.py notify_sql).
-- name: follow.notify
-- only: postgres
SELECT pg_notify({channel}, {instance})
WHERE EXISTS (SELECT 1 FROM followers WHERE expires_at > clock_timestamp());
