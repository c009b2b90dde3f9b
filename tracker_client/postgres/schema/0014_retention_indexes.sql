-- Schema version 14 of the PostgreSQL rail: the queue figures read live rows, not history.
-- additive
-- queue_stats (tracker_client/rules/stats.py; the worker's drain check and its metrics refresh
-- call it) counted failed runs and dead letters with a scan of every run and every task, so its
-- cost grew with the finished work kept (200,000 finished tasks: ~19,000 pages read per call).
-- Partial indexes on just those rows answer both (docs/benchmarks.md, "Finished tasks kept").
CREATE INDEX tasks_dead ON tasks (pipeline_id, dead_letter_from_stage)
    WHERE dead_letter_reason IS NOT NULL;
CREATE INDEX runs_failed ON runs (task_id) WHERE status = 'failed';
