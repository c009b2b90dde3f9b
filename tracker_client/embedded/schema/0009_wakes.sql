-- Schema version 9: the cross-process wake counter.
-- additive
-- `wakes`: one row (made by the first write that bumps it) whose `n` every write that may make
-- work claimable or revoke a lease bumps inside its own transaction (the rail's rule:
-- tracker_client/rules/engine.py `wakes_waiters`). An idle waiter of another process that sees
-- `PRAGMA data_version` move reads `n` and sleeps on when it did not move: a heartbeat or an event
-- wakes nobody. Releases before this one do not bump it; their commits are noticed by the
-- waiters' once-a-second safety look (tracker_client/embedded/engine.py).

CREATE TABLE wakes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);
