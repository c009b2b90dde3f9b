-- idempotency: an operation's answer recorded under its key, replayed on a retry
-- (rules/idempotency.py).

-- name: idempotency.find
SELECT fingerprint, result FROM idempotency WHERE key = ? AND operation = ?;

-- Whether an answer is recorded under any of a batch's keys (a JSON array): one look for a
-- finish_many's keyed items, each key a primary-key probe (rules/finish_many.py). A join, not
-- `key IN (SELECT value FROM json_each(?))`: that builds a temporary index of the keys first
-- (~1.7 us a key, about one look per key; the join ~0.3).
-- name: idempotency.any_recorded
SELECT 1 FROM json_each(?) AS k JOIN idempotency AS i ON i.key = k.value AND i.operation = ?
LIMIT 1;

-- Whether an answer is recorded under a key (the served rail lets a retry of a gone lease's
-- write through to replay it: serve/helpers.py).
-- name: idempotency.recorded
SELECT 1 FROM idempotency WHERE key = ? AND operation = ?;

-- A finish_many's records go as one statement (one step: executemany's step per row gives the
-- GIL up and waits to take it back from the event loop, rules/common.py _many_values).
-- name: idempotency.record
-- many
-- values
INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
VALUES (?, ?, ?, ?, ?);
