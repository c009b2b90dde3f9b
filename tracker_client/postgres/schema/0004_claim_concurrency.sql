-- Schema version 4 of the PostgreSQL rail: claims of several hosts run at once (they hold the
-- write lock in shared mode, see tracker_client/postgres/db.py), so "at most one live lease per
-- concurrency key" cannot rest on one writer at a time any more: this index makes a second
-- lease on a key wait for the first claim's commit and then fail, and that claim is run again
-- alone (it then sees the first lease and skips the key). A lease that lapsed is reclaimed
-- (lease_id cleared) before a claim leases anything, so only live leases hold a key here.
CREATE UNIQUE INDEX tasks_ckey_leased ON tasks (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND lease_id IS NOT NULL;
