-- release: a worker that shuts down gives its unfinished run's task back (rules/release.py).

-- name: release.end_run
UPDATE runs SET status = 'released', ended_at_ms = ?, error = ? WHERE id = ?;

-- name: release.drop_lease
UPDATE tasks SET updated_at_ms = ?, lease_expires_at_ms = 0, lease_id = NULL,
    lease_run_id = NULL, lease_token_sha256 = NULL, lease_ttl_ms = NULL
WHERE seq = ?;
