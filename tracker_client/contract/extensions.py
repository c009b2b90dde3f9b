"""The served tracker's extensions by name: what ``GET /health`` lists and what each stands for.

Pure data, re-exported by the contract table (:mod:`tracker_client.contract.table`),
whose rows name an extension in :attr:`~tracker_client.contract.table.Operation.extension`
or :attr:`~tracker_client.contract.table.Operation.features`.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CONNECTION_EXTENSIONS", "EXTENSIONS"]

#: The extension names a served tracker advertises in ``GET /health`` ``"extensions"``, in the
#: order it lists them, with what each stands for. A client uses an extension only when listed.
EXTENSIONS: Mapping[str, str] = {
    "backlog": "task extensions (concurrency keys, queue TTLs, backoff, caps), fail(retryable)",
    "heartbeat_ttl": "a heartbeat keeps the lease's own TTL (NullTickets resets it to 300 s)",
    "fail_result": "fail answers what happened next (retry scheduled or dead-lettered)",
    "cancel": "POST /tasks/{task_id}/cancel",
    "cancel_all": "POST /ops/cancel-all",
    "requeue": "POST /tasks/{task_id}/requeue",
    "wait": "GET /tasks/{task_id}/wait (long poll until the task finishes)",
    "wait_for_work": "GET /ops/wait-for-work (long poll until work may be claimable)",
    "maintenance": "POST /ops/maintenance",
    "runs": "GET /tasks/{task_id}/runs (every run, with error and usage)",
    "task_events": "GET /tasks/{task_id}/events (every event of a task)",
    "release": "POST /runs/{run_id}/release (give a task back without counting an attempt)",
    "withdraw": "POST /runs/{run_id}/withdraw (undo a lease claimed ahead and never handed "
    "out: the task as if never claimed, no run left, its attempt count unchanged)",
    "count": "GET /ops/count (how many tasks, by stage and/or pipeline, without listing them)",
    "purge": "POST /ops/purge (delete finished tasks older than an age, in batches)",
    "requeue_all": "POST /ops/requeue-all (requeue a pipeline's dead letters, in batches)",
    "delayed_tasks": "task create run_at_ms / delay_ms (not claimable before)",
    "dedupe": "task create dedupe_key / dedupe_window_ms (answers the existing task's id)",
    "schedules": "/schedules (periodic tasks on cron ticks, fired by maintenance)",
    "rate_limits": "/rate-limits (fleet-wide claim rate and leased-task cap per role)",
    "workers": "/workers (live workers: who registered, last seen, alive/lost/stopped, runs)",
    "follow": "GET /tasks/{task_id}/follow (long poll for a task's new events until it ends)",
    "subtasks": "task create parent_id (a task's children; cancel cascades to them)",
    "fan_in": "transition wait_for (dependency edges added in the transition's own write)",
    "upstream": "GET /tasks/{task_id}/upstream (each dependency's outcome, result, artifacts)",
    "checkpoints": "POST /runs/{run_id}/checkpoint, heartbeat checkpoint, claim's "
    "previous_checkpoint",
    "human_steps": "POST /tasks/{task_id}/transition (move a task waiting in a role-less stage)",
    "spans": "GET /tasks/{task_id}/spans (the OTLP spans ingested for a task, by start time)",
    "claim_many": "POST /leases/claim-many (up to n leases of a role in one write: one "
    "housekeeping pass and one candidate scan for all of them)",
    "finish": "POST /runs/{run_id}/finish (a run's last events and its transition or fail in "
    "one write, all or nothing)",
    "finish_many": "POST /runs/finish-many (the final reports of up to 100 runs in one write, "
    "each all or nothing under its own lease token and idempotency key)",
    "finish_claim": "POST /runs/finish-many takes a claim_many body (and its idempotency_key) "
    'under "claim": the leases for the slots the reported runs freed, claimed after the items '
    'in the same write and answered under "claim" (one request instead of two)',
    "list_state": "GET /tasks answers each task's latest run (status, attempt, agent) and "
    'whether a dependency blocks it, under "listed"',
    "budgets": "task create budgets (max_loops, max_runs, max_cost, max_tokens), enforced by the "
    "rail; a task's budget and spend in GET /tasks/{task_id}",
    "pipeline_versions": "POST /pipelines/apply and /pipelines/diff (create or change a "
    "pipeline by name as a new version, moving the tasks of removed stages; or show what would "
    "change)",
    "parked_claim": "POST /leases/claim-parked (claim_many that waits up to wait_ms for work "
    "and leases it as it comes; Idempotency-Key required) and POST /leases/claim-parked/cancel "
    "(stop it, giving back what it leased)",
    "keep_alive": "persistent connections: a client may send many requests on one connection "
    "(idle ones are closed after 5 s)",
}


#: Extensions of the connection, not of an operation: no row names them.
CONNECTION_EXTENSIONS = frozenset({"keep_alive"})
