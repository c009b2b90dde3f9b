-- Schema version 17 of the PostgreSQL rail: versioned pipeline definitions (embedded schema 11;
-- `pipeline apply`, docs/operate/pipelines.md).
-- additive
-- `pipelines.definition` stays the CURRENT definition (what a release before this one reads) and
-- `pipelines.version` its number (1 for every pipeline made before). `pipeline_versions` keeps
-- every version's definition and the stage moves it was applied with (JSON: old -> new).
-- `tasks.pipeline_version`: the version a task is under (NULL: the current one). A task leased
-- while an apply changes its pipeline keeps its version and finishes under it;
-- `pipeline_forward` lists those tasks for the maintenance pass that brings them forward.
ALTER TABLE pipelines ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

ALTER TABLE tasks ADD COLUMN pipeline_version BIGINT;

CREATE TABLE pipeline_versions (
    pipeline_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    definition TEXT NOT NULL,
    moves TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (pipeline_id, version)
);

CREATE TABLE pipeline_forward (
    task_id TEXT PRIMARY KEY,
    pipeline_id TEXT NOT NULL
);

-- The one-trip transitions check the pipeline's version (see bw_version_is in schema.sql): a
-- caller passes "<pipeline id>@<version>" of the definition it worked the move out from, and
-- the call answers FALSE (nothing written) unless the task and the pipeline are at that
-- version. A caller passing the id alone (a release before this one) is answered as before.
CREATE FUNCTION bw_version_is(p_pipeline TEXT, p_task_version BIGINT, p_planned BIGINT)
RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT coalesce(p_task_version, p.version) = p_planned AND p.version = p_planned
    FROM pipelines p WHERE p.id = p_pipeline
$$;

CREATE OR REPLACE FUNCTION bw_transition(
    p_run TEXT, p_token TEXT, p_pipeline TEXT, p_stage TEXT, p_version BIGINT, p_to TEXT,
    p_role TEXT, p_terminal BIGINT, p_usage TEXT, p_event TEXT, p_now BIGINT, p_key TEXT,
    p_fp TEXT, p_result TEXT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    t_seq BIGINT;
    t_id TEXT;
BEGIN
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM idempotency WHERE key = p_key AND operation = 'transition'
    ) THEN
        RETURN FALSE;
    END IF;
    SELECT t.seq, t.id INTO t_seq, t_id
    FROM runs r JOIN tasks t ON t.id = r.task_id
    WHERE r.id = p_run AND t.lease_run_id = p_run AND t.lease_token_sha256 = p_token
      AND t.lease_expires_at_ms > p_now AND t.pipeline_id = split_part(p_pipeline, '@', 1)
      AND t.stage = p_stage AND (p_version IS NULL OR t.task_version = p_version)
      AND (strpos(p_pipeline, '@') = 0 OR bw_version_is(t.pipeline_id, t.pipeline_version,
          split_part(p_pipeline, '@', 2)::bigint))
    FOR NO KEY UPDATE OF t;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    UPDATE runs SET status = 'completed', ended_at_ms = p_now, usage = p_usage WHERE id = p_run;
    UPDATE tasks SET stage = p_to, task_version = task_version + 1, dead_letter_reason = NULL,
        next_eligible_at_ms = 0, updated_at_ms = p_now, role = p_role, terminal = p_terminal,
        stale_streak = 0, lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL,
        lease_token_sha256 = NULL, lease_ttl_ms = NULL
    WHERE seq = t_seq;
    INSERT INTO events (task_id, run_id, ts_ms, kind, data)
    VALUES (t_id, p_run, p_now, 'transition', p_event);
    IF p_key IS NOT NULL THEN
        INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
        VALUES (p_key, 'transition', p_fp, p_result, p_now);
    END IF;
    RETURN TRUE;
END
$$;

CREATE OR REPLACE FUNCTION bw_move(
    p_op TEXT, p_run TEXT, p_token TEXT, p_pipeline TEXT, p_stage TEXT, p_version BIGINT,
    p_to TEXT, p_role TEXT, p_terminal BIGINT, p_usage TEXT, p_event TEXT, p_now BIGINT,
    p_key TEXT, p_fp TEXT, p_result TEXT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    t_seq BIGINT;
    t_id TEXT;
BEGIN
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM idempotency WHERE key = p_key AND operation = p_op
    ) THEN
        RETURN FALSE;
    END IF;
    SELECT t.seq, t.id INTO t_seq, t_id
    FROM runs r JOIN tasks t ON t.id = r.task_id
    WHERE r.id = p_run AND t.lease_run_id = p_run AND t.lease_token_sha256 = p_token
      AND t.lease_expires_at_ms > p_now AND t.pipeline_id = split_part(p_pipeline, '@', 1)
      AND t.stage = p_stage AND (p_version IS NULL OR t.task_version = p_version)
      AND (strpos(p_pipeline, '@') = 0 OR bw_version_is(t.pipeline_id, t.pipeline_version,
          split_part(p_pipeline, '@', 2)::bigint))
    FOR NO KEY UPDATE OF t;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    UPDATE runs SET status = 'completed', ended_at_ms = p_now, usage = p_usage WHERE id = p_run;
    UPDATE tasks SET stage = p_to, task_version = task_version + 1, dead_letter_reason = NULL,
        next_eligible_at_ms = 0, updated_at_ms = p_now, role = p_role, terminal = p_terminal,
        stale_streak = 0, lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL,
        lease_token_sha256 = NULL, lease_ttl_ms = NULL
    WHERE seq = t_seq;
    INSERT INTO events (task_id, run_id, ts_ms, kind, data)
    VALUES (t_id, p_run, p_now, 'transition', p_event);
    IF p_key IS NOT NULL THEN
        INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
        VALUES (p_key, p_op, p_fp, p_result, p_now);
    END IF;
    RETURN TRUE;
END
$$;
