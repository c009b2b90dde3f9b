"""A command's ``outcome.json``: trigger, instructions, usage, result and declared artifacts.

Split from :mod:`plugins.command.executor`. The file is read after a mapped exit code::

    {"trigger": "approve", "instructions": "...", "usage": {...}, "result": {"score": 0.9},
     "artifacts": [{"path": "out/report.md", "kind": "report", "meta": {"lines": 12}}]}

Every key is optional; ``result`` (any JSON value) is the task's result, kept by
:func:`plugins.results.record_result` (``wait()`` answers it, dependents read it); ``store``,
``spawn`` and ``wait_for`` are the agent keys (:mod:`plugins.command.agent`). Each artifact's
``path`` is relative to the run's working directory and must stay inside it (no absolute path, no
``..`` or symlink leading out); ``kind`` defaults to ``file``; ``meta`` (an object) is recorded with
``"path"`` added. The files are hashed and sized by
:meth:`~plugins.api.ExecutionContext.artifact_file`, and copied to ``<artifacts_dir>/<task id>/<run
id>/<path>`` first (the executor's ``artifacts_dir``, by default a directory that outlives the run:
:func:`plugins.artifact_files.default_artifacts_dir`).

It may touch the run's working directory only (``outcome.json`` read, the declared paths resolved
inside it); hashing and copying the files is the context's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.api import ExecutionContext
from plugins.artifact_files import path_component
from plugins.command.agent import check_agent_keys

__all__ = [
    "MAX_ARTIFACTS",
    "OUTCOME_FILE",
    "DeclaredArtifact",
    "read_outcome_file",
    "record_artifacts",
    "resolve_artifacts",
]

OUTCOME_FILE = "outcome.json"
MAX_ARTIFACTS = 100
_MAX_OUTCOME_BYTES = 1 << 20
_KEYS = ("trigger", "instructions", "usage", "result", "artifacts", "store", "spawn", "wait_for")
_ARTIFACT_KEYS = ("path", "kind", "meta")


@dataclass(frozen=True, slots=True)
class DeclaredArtifact:
    """One entry of ``artifacts``: a path relative to the workdir, its kind and meta."""

    path: str
    kind: str = "file"
    meta: dict[str, Any] | None = None


def _artifacts(name: str, value: Any) -> list[DeclaredArtifact]:
    if not isinstance(value, list):
        raise ValueError(f"{name}: 'artifacts' must be a list of objects")
    if len(value) > MAX_ARTIFACTS:
        raise ValueError(f"{name}: more than {MAX_ARTIFACTS} artifacts")
    out: list[DeclaredArtifact] = []
    for i, item in enumerate(value):
        where = f"{name}: artifacts[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object {{path, kind, meta}}")
        unknown = sorted(set(item) - set(_ARTIFACT_KEYS))
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                f"(allowed: {', '.join(_ARTIFACT_KEYS)})"
            )
        path, kind, meta = item.get("path"), item.get("kind", "file"), item.get("meta")
        if not isinstance(path, str) or not path or "\0" in path:
            raise ValueError(f"{where}: 'path' must be a non-empty string, got {path!r}")
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"{where}: 'kind' must be a non-empty string, got {kind!r}")
        if meta is not None and not isinstance(meta, dict):
            raise ValueError(f"{where}: 'meta' must be an object")
        out.append(DeclaredArtifact(path, kind, meta))
    return out


def read_outcome_file(path: Path) -> dict[str, Any] | None:
    """Parse ``outcome.json`` (None when absent). Raises ValueError naming what is wrong.

    ``artifacts``, when present, is returned as a list of :class:`DeclaredArtifact`.
    """
    try:
        with path.open("rb") as fh:
            raw = fh.read(_MAX_OUTCOME_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    if len(raw) > _MAX_OUTCOME_BYTES:
        raise ValueError(f"{path.name} is larger than {_MAX_OUTCOME_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{path.name} must hold a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(_KEYS))
    if unknown:
        raise ValueError(
            f"{path.name}: unknown key(s) {', '.join(map(repr, unknown))} "
            f"(allowed: {', '.join(_KEYS)})"
        )
    trigger = doc.get("trigger")
    if trigger is not None and (not isinstance(trigger, str) or not trigger.strip()):
        raise ValueError(f"{path.name}: 'trigger' must be a non-empty string, got {trigger!r}")
    if not isinstance(doc.get("instructions", ""), str | None):
        raise ValueError(f"{path.name}: 'instructions' must be a string")
    if "artifacts" in doc:
        doc["artifacts"] = _artifacts(path.name, doc["artifacts"])
    check_agent_keys(path.name, doc)
    return doc


def resolve_artifacts(workdir: Path, declared: list[DeclaredArtifact]) -> list[tuple[Path, str]]:
    """Each declared file as ``(absolute path, path relative to workdir)``, all checked first.

    ValueError naming the entry when a path is absolute, leads out of ``workdir`` (through
    ``..`` or a symlink), does not exist or is not a regular file. Blocking (file system).
    """
    base = workdir.resolve()
    out: list[tuple[Path, str]] = []
    for i, item in enumerate(declared):
        where = f"{OUTCOME_FILE}: artifacts[{i}] {item.path!r}"
        if os.path.isabs(item.path):
            raise ValueError(f"{where}: must be relative to the run's working directory")
        try:
            target = (base / item.path).resolve(strict=True)
        except FileNotFoundError:
            raise ValueError(f"{where}: no such file in the run's working directory") from None
        except (OSError, RuntimeError) as exc:  # a symlink loop, a too-long path
            raise ValueError(f"{where}: {exc}") from None
        if not target.is_relative_to(base):
            raise ValueError(
                f"{where} leads outside the run's working directory {base} (to {target}); "
                "artifacts must be files inside it"
            )
        if not target.is_file():
            raise ValueError(f"{where} is not a regular file")
        out.append((target, target.relative_to(base).as_posix()))
    return out


async def record_artifacts(
    ctx: ExecutionContext,
    declared: list[DeclaredArtifact],
    resolved: list[tuple[Path, str]],
    artifacts_dir: Path | None,
) -> list[str]:
    """Record the checked files (copied under ``artifacts_dir`` first, unless None); their ids."""
    ids: list[str] = []
    for item, (path, relative) in zip(declared, resolved, strict=True):
        copy_to = None
        if artifacts_dir is not None:
            run_dir = artifacts_dir / path_component(ctx.task.id) / path_component(ctx.run.id)
            copy_to = run_dir / Path(relative)
        meta = {**(item.meta or {}), "path": relative}
        ids.append(await ctx.artifact_file(path, kind=item.kind, meta=meta, copy_to=copy_to))
    return ids
