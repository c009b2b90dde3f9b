-- store: the KV store and its FTS5 full-text search (rules/store.py).

-- name: store.put
INSERT INTO store (namespace, key, value, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, key) DO UPDATE
SET value = excluded.value, updated_at_ms = excluded.updated_at_ms;

-- name: store.get
SELECT * FROM store WHERE namespace = ? AND key = ?;

-- name: store.delete
DELETE FROM store WHERE namespace = ? AND key = ?;

-- name: store.delete_namespace
DELETE FROM store WHERE namespace = ?;

-- name: store.list
SELECT * FROM store WHERE namespace = ? ORDER BY key;

-- Every word a quoted FTS5 phrase, ANDed (:match); :namespace and :path/:value optional.
-- name: store.search_fts
-- only: sqlite
SELECT s.* FROM store_fts JOIN store s ON s.id = store_fts.rowid
WHERE store_fts MATCH :match
    AND (:namespace IS NULL OR s.namespace = :namespace)
    AND (:path IS NULL OR json_extract(s.value, :path) = :value
        OR CAST(json_extract(s.value, :path) AS TEXT) = :value)
ORDER BY store_fts.rank LIMIT :limit;
