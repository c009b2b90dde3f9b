"""A task's result as a value: checked as JSON, kept as the ``result`` event or, when big, a file.

A python job's returned value and the ``command`` executor's ``outcome.json`` ``result`` key go
through :func:`record_result` (see ``docs/executors/python-jobs.md`` and
``docs/executors/command.md``). The rail answers the task's latest event of kind ``result`` to
``wait()``, ``submit --wait``, ``task show`` and to the task's dependents (``ctx.upstream``,
``read_upstream()``), so a value recorded here reaches all of them (``docs/submit/producer.md``).

A value whose JSON is at most :data:`MAX_INLINE_RESULT_BYTES` is the event's data as it is. A
bigger one is written to ``<artifacts dir>/<task id>/<run id>/result.json`` (a directory that
outlives the run, :func:`plugins.artifact_files.default_artifacts_dir` unless the caller names
one), recorded as an artifact of kind ``result``, and the event holds where it is:
``{"artifact_id", "uri", "size_bytes", "sha256"}``. Events are rows of the rail, read whole by
every ``wait()`` and every dependent; a cap keeps them cheap.

It may touch the result file (written atomically through a temporary file beside it) and the
run's context (one event, one artifact); nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from plugins.api import ExecutionContext, Failure

__all__ = [
    "MAX_INLINE_RESULT_BYTES",
    "RESULT_FILE",
    "RESULT_KIND",
    "json_problem",
    "record_result",
]

#: The largest result (its compact UTF-8 JSON) kept in the ``result`` event itself: 64 KiB, as a
#: checkpoint. Bigger ones become an artifact of kind ``result`` (a file of the JSON).
MAX_INLINE_RESULT_BYTES = 64 * 1024
#: The event kind (and the artifact kind of a big result) the rail answers as the task's result.
RESULT_KIND = "result"
#: The name of a big result's file under ``<artifacts dir>/<task id>/<run id>/``.
RESULT_FILE = "result.json"
_MAX_DEPTH = 200


def json_problem(value: Any, where: str = "the result") -> str | None:
    """Why ``value`` is not a JSON value kept as it is, naming the place and the type; or None.

    JSON here: None, bool, int, finite float, str, a list or tuple of JSON values, a dict with
    string keys and JSON values. A dict with a non-string key is refused (JSON would turn
    ``1`` into ``"1"``, colliding with a ``"1"`` key), as are NaN and infinities (not JSON) and a
    container holding itself.
    """
    return _problem(value, where, 0, set())


def _problem(item: Any, path: str, depth: int, ancestors: set[int]) -> str | None:
    if item is None or isinstance(item, str | bool | int):
        return None
    if isinstance(item, float):
        return None if math.isfinite(item) else f"{path} is the float {item!r}, not JSON"
    if not isinstance(item, Mapping | list | tuple):
        return f"{path} is a {type(item).__name__}, not a JSON value"
    if id(item) in ancestors:
        return f"{path} contains itself"
    if depth >= _MAX_DEPTH:
        return f"{path} is nested more than {_MAX_DEPTH} levels deep"
    ancestors.add(id(item))
    try:
        if isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str):
                    return (
                        f"{path} has the key {key!r} (a {type(key).__name__}); "
                        "JSON object keys are strings"
                    )
                if (found := _problem(child, f"{path}[{key!r}]", depth + 1, ancestors)) is not None:
                    return found
            return None
        for i, child in enumerate(item):
            if (found := _problem(child, f"{path}[{i}]", depth + 1, ancestors)) is not None:
                return found
        return None
    finally:
        ancestors.discard(id(item))


def _write_atomically(dest: Path, data: bytes) -> None:
    """Write ``data`` to ``dest`` through a fsynced temporary file beside it (directories made)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


async def record_result(
    ctx: ExecutionContext, value: Any, *, source: str, artifacts_dir: Path | None = None
) -> Failure | None:
    """Record ``value`` as the task's result; None when kept, else the run's Failure.

    ``source`` names what produced it in messages (``"mypkg.jobs:summarise"``). A value that is
    not JSON fails with ``bad_executor_output`` naming where and what it is (nothing recorded);
    a big result's file that cannot be written fails with ``artifact_failed`` (retryable). A
    big result goes under ``artifacts_dir`` (None: the default directory, see the module).
    """
    problem = json_problem(value)
    if problem is not None:
        return Failure(
            reason="bad_executor_output",
            message=f"{source} returned a result that is not JSON: {problem}",
            retryable=False,
        )
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    data = text.encode()
    await ctx.flush()  # an earlier unflushed `result` report must not merge into a batch with it
    if len(data) <= MAX_INLINE_RESULT_BYTES:
        # as a reader will get it (a tuple is a list): a copy, so no later change leaks in
        await ctx.report(RESULT_KIND, json.loads(text), flush=True)
        return None
    # imported here: only a big result is a file (issue 31, start-up)
    from plugins.artifact_files import default_artifacts_dir, path_component

    base = default_artifacts_dir()[0] if artifacts_dir is None else artifacts_dir
    dest = base / path_component(ctx.task.id) / path_component(ctx.run.id) / RESULT_FILE
    try:
        await anyio.to_thread.run_sync(_write_atomically, dest, data)
    except OSError as exc:
        return Failure(
            reason="artifact_failed",
            message=f"{source}: a {len(data)}-byte result (over {MAX_INLINE_RESULT_BYTES} "
            f"bytes, so kept as a file) could not be written to {dest}: {exc}",
            retryable=True,
        )
    sha256 = hashlib.sha256(data).hexdigest()
    uri = dest.absolute().as_uri()
    artifact_id = await ctx.artifact(
        RESULT_KIND,
        uri,
        sha256=sha256,
        size_bytes=len(data),
        meta={"path": RESULT_FILE, "media_type": "application/json"},
    )
    await ctx.report(
        RESULT_KIND,
        {"artifact_id": artifact_id, "uri": uri, "size_bytes": len(data), "sha256": sha256},
        flush=True,
    )
    return None
