-- pipelines: the pipeline cache's reads (rules/pipelines.py).

-- name: pipelines.get
SELECT id, name, definition, created_at_ms FROM pipelines WHERE id = %s;

-- name: pipelines.count
SELECT count(*) FROM pipelines;

-- name: pipelines.all
SELECT id, name, definition, created_at_ms FROM pipelines ORDER BY seq;
