-- Delayed tasks and dedupe keys (issue 12 items 2 and 4).
--
-- run_at_ms: the time a delayed task was scheduled for (NULL = created due). The claim scan
-- still uses next_eligible_at_ms (set to run_at_ms at creation); run_at_ms is kept so `queue`
-- and `task show` can tell a scheduled task from one waiting on a retry delay.
ALTER TABLE tasks ADD COLUMN run_at_ms INTEGER;

-- dedupe_key: a create carrying a key answers the id of a task with the same key that is
-- still waiting or running instead of creating a new one. dedupe_window_ms: how long after
-- that task finished the key still dedupes (NULL/0 = not at all), counted from the finished
-- task's updated_at_ms (the write that finished it).
ALTER TABLE tasks ADD COLUMN dedupe_key TEXT;
ALTER TABLE tasks ADD COLUMN dedupe_window_ms INTEGER;

-- The dedupe look-up. Not UNIQUE on purpose: a finished task can be moved back into play
-- (a transition out of a terminal stage, a dead letter requeued) while a newer task holds
-- the same key, and that move must not fail. Atomicity comes from the create's
-- BEGIN IMMEDIATE transaction (one writer at a time across every process on the file).
CREATE INDEX tasks_dedupe ON tasks (dedupe_key, seq) WHERE dedupe_key IS NOT NULL;
