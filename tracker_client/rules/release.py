"""``release``: a worker that shuts down gives its unfinished run's task back, without a failure.

A run ended by ``SIGTERM``/a restart is not the task's fault: failing it would count against
``max_attempts`` (a task with one attempt was dead-lettered by one ``systemctl restart``) and
apply the retry delay. Releasing ends the run ``released``, drops the lease and makes the task
claimable at once; its failure count, retry delay and stale streak are untouched. The attempt
number still grows (it numbers runs), and a ``released`` event records the reason.
"""

from __future__ import annotations

from tracker_client.errors import ValidationFailed
from tracker_client.models import ReleaseResult
from tracker_client.rules.common import Ctx
from tracker_client.rules.runs import check_lease

__all__ = ["release"]

MAX_REASON_CHARS = 200


def release(ctx: Ctx, run_id: str, token_sha256: str, reason: str) -> ReleaseResult:
    """End the leased run ``released`` and make its task claimable now (nothing counted)."""
    task = check_lease(ctx, run_id, token_sha256)
    if not isinstance(reason, str) or not reason or len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed(
            f"release reason must be a non-empty string of at most {MAX_REASON_CHARS} characters"
        )
    now = ctx.now
    ctx.exec("release.end_run", (now, f"released: {reason}", run_id))
    # next_eligible_at_ms: a claim made the task eligible already (<= now); keep it so.
    ctx.exec("release.drop_lease", (now, task["seq"]))
    ctx.event(
        task["id"],
        run_id,
        "released",
        {"reason": reason, "failed_attempts": int(task["failed_attempts"])},
    )
    ctx.log(
        "task_released",
        f"task {task['id']} released unfinished ({reason}); claimable again",
        task_id=task["id"],
        run_id=run_id,
        role=task["role"],
        reason=reason,
    )
    return ReleaseResult(released=True, reason=reason)
