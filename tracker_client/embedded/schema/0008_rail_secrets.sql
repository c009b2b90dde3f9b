-- Schema version 8: the rail's secrets.
-- additive
-- `rail_secrets`: named random keys made once per rail. `lease_token_key` (32 bytes, hex) derives
-- the lease token of a claim made with an idempotency key, so a replay of that claim answers the
-- same token while only its SHA-256 is stored (tracker_client/rules/leasekeys.py). The row is
-- made (from Python's `secrets`) on the rail's first keyed claim. Never logged or answered, and
-- not copied by `rail copy` (a copy makes its own).

CREATE TABLE rail_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
