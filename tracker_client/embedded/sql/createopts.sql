-- createopts: task creation's dedupe look-up (rules/createopts.py).

-- A task holding a key: waiting or running (not finished, not dead-lettered), or finished
-- (terminal stage or dead letter) less than its own dedupe_window_ms ago. Newest first.
-- name: createopts.dedupe_holder
SELECT id FROM tasks WHERE dedupe_key = ? AND (
    (terminal = 0 AND dead_letter_reason IS NULL)
    OR (dedupe_window_ms > 0 AND updated_at_ms + dedupe_window_ms > ?)
) ORDER BY seq DESC LIMIT 1;
