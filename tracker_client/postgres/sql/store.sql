-- store: the KV store (rules/store.py) and its tsvector full-text search (postgres/search.py).

-- name: store.put
INSERT INTO store (namespace, key, value, created_at_ms, updated_at_ms)
VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, key) DO UPDATE
SET value = EXCLUDED.value, updated_at_ms = EXCLUDED.updated_at_ms;

-- name: store.get
SELECT * FROM store WHERE namespace = %s AND key = %s;

-- name: store.delete
DELETE FROM store WHERE namespace = %s AND key = %s;

-- name: store.delete_namespace
DELETE FROM store WHERE namespace = %s;

-- name: store.list
SELECT * FROM store WHERE namespace = %s ORDER BY key;

-- Every word of :words (a JSON array) must match as a phrase of its tokens: the query is
-- phraseto_tsquery(w1) && phraseto_tsquery(w2) && ..., folded in word order (an InitPlan:
-- computed once, so the GIN index store_search answers it). Best match first; :namespace and
-- :path (a JSON path whose value must equal :value as text) optional.
-- name: store.search_tsvector
-- only: postgres
WITH RECURSIVE word AS (
    SELECT phraseto_tsquery('simple', w.value) AS q, w.n
    FROM jsonb_array_elements_text(%(words)s::jsonb) WITH ORDINALITY AS w (value, n)
), folded AS (
    SELECT q, n FROM word WHERE n = 1
    UNION ALL
    SELECT folded.q && word.q, word.n FROM folded JOIN word ON word.n = folded.n + 1
)
SELECT s.*, ts_rank(s.search, (SELECT q FROM folded ORDER BY n DESC LIMIT 1)) AS rank
FROM store s
WHERE s.search @@ (SELECT q FROM folded ORDER BY n DESC LIMIT 1)
    AND (%(namespace)s::text IS NULL OR s.namespace = %(namespace)s)
    AND (%(path)s::text IS NULL
        OR jsonb_path_query_first(s.value::jsonb, %(path)s::jsonpath) #>> '{}' = %(value)s)
ORDER BY rank DESC, s.id LIMIT %(limit)s;

-- A filter path is read as a JSON path before the search uses it, in a savepoint (a bad one
-- fails without failing the transaction).
-- name: store.path_begin
-- only: postgres
SAVEPOINT filter_path;

-- name: store.path_check
-- only: postgres
SELECT %s::jsonpath;

-- name: store.path_undo
-- only: postgres
ROLLBACK TO SAVEPOINT filter_path;

-- name: store.path_end
-- only: postgres
RELEASE SAVEPOINT filter_path;
