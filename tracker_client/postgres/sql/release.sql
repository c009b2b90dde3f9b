-- release: a worker that shuts down gives its unfinished run's task back (rules/release.py).

-- name: release.end_run
-- shared
-- deferred
UPDATE runs SET status = 'released', ended_at_ms = %s, error = %s WHERE id = %s;

-- name: release.drop_lease
-- shared
-- deferred
UPDATE tasks SET updated_at_ms = %s, lease_expires_at_ms = 0, lease_id = NULL,
    lease_run_id = NULL, lease_token_sha256 = NULL, lease_ttl_ms = NULL
WHERE seq = %s;
