-- leasekeys: the rail's key lease tokens of keyed claims are derived with (rules/leasekeys.py).

-- name: leasekeys.read
SELECT value FROM rail_secrets WHERE name = ?;

-- name: leasekeys.make
INSERT OR IGNORE INTO rail_secrets (name, value) VALUES (?, ?);
