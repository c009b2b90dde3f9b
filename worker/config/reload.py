"""What a HUP reload applies, and which changed keys need a restart instead.

Applied to new claims (in-flight runs keep theirs): the roles (executors rebuilt, their options,
``max_concurrency``, ``timeout_s``, ``lease_ttl_s``, triggers) and the ``[worker]`` keys
:meth:`~worker.daemon.Worker.set_config` takes (``concurrency`` resizes the slots). Every other
key (the whole ``[tracker]`` table: its connection is open; ``agent_id``; ``max_tasks``,
``drain``, ``maintenance_interval_s``, ``event_loop``, ``gc_tuning``, ``python_path``;
logging) keeps its running value, and each one that changed is named in a WARNING, so an edit is
never silently ignored.

No I/O: it compares two loaded configurations and logs the keys that need a restart; applying them
is :meth:`~worker.daemon.Worker.set_config`'s.
"""

from __future__ import annotations

import logging

from worker.config.models import Config, TrackerConfig

__all__ = ["RESTART_TOP_KEYS", "RESTART_WORKER_KEYS", "plan_reload"]

log = logging.getLogger("backlog_worker.cli")

#: ``[worker]`` keys read once at start-up: a reload keeps their running values.
RESTART_WORKER_KEYS = (
    "agent_id",
    "max_tasks",
    "drain",
    "maintenance_interval_s",
    "event_loop",
    "gc_tuning",
    "python_path",
)
#: Top-level keys and tables read once at start-up (the logging set-up, the metrics listener
#: and the trace exporter).
RESTART_TOP_KEYS = ("log_level", "log_format", "metrics", "tracing")


def plan_reload(running: Config, fresh: Config) -> tuple[Config, list[str]]:
    """The configuration to apply (``fresh`` with the restart-only keys of ``running``) and the
    dotted names of the restart-only keys that changed (each also logged at WARNING)."""
    pending: list[str] = []
    for name in (*TrackerConfig.model_fields, "api_token_source"):
        if getattr(running.tracker, name) != getattr(fresh.tracker, name):
            pending.append(f"tracker.{name}")
    for name in RESTART_WORKER_KEYS:
        if getattr(running.worker, name) != getattr(fresh.worker, name):
            pending.append(f"worker.{name}")
    for name in RESTART_TOP_KEYS:
        if getattr(running, name) != getattr(fresh, name):
            pending.append(name)
    kept = {name: getattr(running.worker, name) for name in RESTART_WORKER_KEYS}
    applied = fresh.model_copy(
        update={
            "tracker": running.tracker,
            "worker": fresh.worker.model_copy(update=kept),
            **{name: getattr(running, name) for name in RESTART_TOP_KEYS},
        }
    )
    for key in pending:  # names only: a value may be a token
        log.warning(
            "reload: %s changed but needs a restart; the running value is kept",
            key,
            extra={"action": "reload_needs_restart", "key": key},
        )
    return applied, pending
