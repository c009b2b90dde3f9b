"""Child-process environments built from scratch, so tracker tokens never reach a child.

Re-exported by :mod:`plugins.proc.process`; executors normally import from there.

It may touch the worker's environment (read only: copied by allowlist, never changed); it imports
nothing of the project.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from collections.abc import Iterable, Mapping

__all__ = ["SECRET_ENV_PATTERNS", "is_secret_env_name", "minimal_env", "trace_env"]

logger = logging.getLogger("backlog_worker.executor.proc")

#: Environment names that are never passed to a child, even when allowlisted (fnmatch, upper case).
SECRET_ENV_PATTERNS: tuple[str, ...] = (
    "BACKLOG_WORKER_*TOKEN*",
    "BACKLOG_*TOKEN*",
    "*_API_TOKEN",
    "NULLTICKETS_*",
)


_warned: set[str] = set()


def is_secret_env_name(name: str) -> bool:
    """True when ``name`` looks like a tracker token variable (see :data:`SECRET_ENV_PATTERNS`)."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_ENV_PATTERNS)


def minimal_env(
    passthrough: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Build a child environment from scratch.

    It holds ``PATH`` (the worker's, else :data:`os.defpath`), ``LANG`` (the worker's, else
    ``C.UTF-8``) and ``LC_ALL`` when set, then every allowlisted name of ``passthrough`` present in
    ``base`` (default :data:`os.environ`; a name may be an fnmatch pattern such as ``LC_*``;
    ``HOME`` only when listed), then ``extra``. Names that look like tokens
    (:func:`is_secret_env_name`) are dropped even when allowlisted or given in ``extra``.
    """
    source = os.environ if base is None else base
    env: dict[str, str] = {
        "PATH": source.get("PATH") or os.defpath,
        "LANG": source.get("LANG") or "C.UTF-8",
    }
    if source.get("LC_ALL"):
        env["LC_ALL"] = source["LC_ALL"]
    for name in passthrough:
        if any(ch in name for ch in "*?["):
            env.update({k: v for k, v in source.items() if fnmatch.fnmatchcase(k, name)})
        elif name in source:
            env[name] = source[name]
    env.update(extra or {})
    for name in [n for n in env if is_secret_env_name(n)]:
        del env[name]
        # once per name: an allowlisted token would otherwise warn on every run
        if name not in _warned:
            _warned.add(name)
            logger.warning(
                "not passing %s to child processes: it looks like a token",
                name,
                extra={"action": "env_secret_dropped"},
            )
    return env


#: A W3C ``traceparent`` (version 00): what :func:`trace_env` passes on.
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_env(traceparent: str | None) -> dict[str, str]:
    """``{"TRACEPARENT": traceparent}`` for a child's environment when the worker traces the
    run (the run's W3C trace context, so the child's own spans join its trace: the
    OpenTelemetry SDKs read it as an environment carrier), else nothing. A value that is not a
    version-00 traceparent is not passed (it can only be a bug, and would break the child's
    propagator)."""
    if traceparent is None or _TRACEPARENT.fullmatch(traceparent) is None:
        return {}
    return {"TRACEPARENT": traceparent}
