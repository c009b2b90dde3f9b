"""The ``command`` executor as an agent: the store through templates and ``outcome.json``,
subtasks and fan-in through ``outcome.json``, checkpoints and upstream through files.

* ``{store.<namespace>.<key>}`` in ``argv``/``env``/``cwd``: the value in the rail's store, read
  once when the run starts (text as is, other JSON as JSON; absent: empty).
* ``<workdir>/checkpoint.json``: the previous attempt's checkpoint (written before the child
  starts when there is one). The child saves a new one by writing the file: when the child has
  ended (however it ended) a changed file becomes the run's checkpoint (``ctx.checkpoint``: JSON,
  at most 64 KiB, else the run fails ``bad_executor_output`` naming the file).
* ``<workdir>/upstream.json``: the task's dependencies as they ended (``ctx.upstream``: a list of
  ``{task_id, title, stage, outcome, result, artifacts}``), when it has any.
* ``outcome.json`` keys (read after a mapped exit code, with ``trigger`` and the rest):
  ``"store": {"ns": {"key": value}}`` (``null`` deletes the key), ``"spawn": [{"pipeline": "p",
  "title": "t", "description": "", "metadata": {}, "priority": 0, "wait": true}]`` (subtasks of
  this task; the move waits for each unless ``"wait": false``) and ``"wait_for": ["task id"]``
  (more tasks to wait for). Written in that order; the first refused write fails the run,
  naming it (the writes before it stay).

The child never gets a token: every read and write here is the worker's, through the context.
It may touch the run's working directory (those two files) and the context's agent calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from plugins.agent import checkpoint_json
from plugins.api import ExecutionContext
from plugins.command.template import STORE_FIELD, Template

__all__ = [
    "CHECKPOINT_FILE",
    "MAX_SPAWN",
    "UPSTREAM_FILE",
    "apply_outcome",
    "check_agent_keys",
    "read_store_fields",
    "save_checkpoint_file",
    "write_inputs",
]

CHECKPOINT_FILE = "checkpoint.json"
UPSTREAM_FILE = "upstream.json"
#: The most subtasks one ``outcome.json`` may spawn.
MAX_SPAWN = 100
_SPAWN_KEYS = ("pipeline", "title", "description", "metadata", "priority", "wait")


async def read_store_fields(ctx: ExecutionContext, templates: list[Template]) -> dict[str, Any]:
    """The values of every ``{store.ns.key}`` the templates name, read once each."""
    values: dict[str, Any] = {}
    for template in templates:
        for field in template.fields:
            match = STORE_FIELD.match(field)
            if match and field not in values:
                values[field] = await ctx.store.get(match.group(1), match.group(2))
    return values


def write_inputs(ctx: ExecutionContext, workdir: Path) -> str | None:
    """Write ``checkpoint.json`` and ``upstream.json`` when there is something to put in them;
    the checkpoint's text as written (to tell a changed file). Blocking (file system)."""
    written: str | None = None
    if ctx.previous_checkpoint is not None:
        written = json.dumps(ctx.previous_checkpoint, ensure_ascii=False, indent=2)
        (workdir / CHECKPOINT_FILE).write_text(written)
    if ctx.upstream:
        doc = [u.model_dump(mode="json") for u in ctx.upstream]
        (workdir / UPSTREAM_FILE).write_text(json.dumps(doc, ensure_ascii=False, indent=2))
    return written


def _read_checkpoint_file(workdir: Path, written: str | None) -> tuple[bool, Any]:
    """(changed, value) of ``checkpoint.json``; ValueError naming what is wrong."""
    path = workdir / CHECKPOINT_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return False, None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {CHECKPOINT_FILE}: {exc}") from exc
    if text == written:
        return False, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{CHECKPOINT_FILE} is not valid JSON: {exc}") from exc
    try:
        checkpoint_json(value)
    except ValueError as exc:
        raise ValueError(f"{CHECKPOINT_FILE}: {exc}") from exc
    return True, value


async def save_checkpoint_file(ctx: ExecutionContext, workdir: Path, written: str | None) -> None:
    """A ``checkpoint.json`` the child changed becomes the run's checkpoint; ValueError (naming
    the file and the limit) when it is not JSON or too large: nothing is kept then."""
    changed, value = await anyio.to_thread.run_sync(_read_checkpoint_file, workdir, written)
    if changed:
        try:
            await ctx.checkpoint(value)
        except ValueError as exc:
            raise ValueError(f"{CHECKPOINT_FILE}: {exc}") from exc


def check_agent_keys(name: str, doc: dict[str, Any]) -> None:
    """Check ``store``, ``spawn`` and ``wait_for`` of an ``outcome.json``; ValueError naming
    the entry."""
    store = doc.get("store")
    if store is not None:
        if not isinstance(store, dict) or not all(
            isinstance(ns, str) and ns and isinstance(keys, dict) for ns, keys in store.items()
        ):
            raise ValueError(f"{name}: 'store' must be an object {{namespace: {{key: value}}}}")
        for ns, keys in store.items():
            for key in keys:
                if not key:
                    raise ValueError(f"{name}: store.{ns}: a key must be a non-empty string")
    spawn = doc.get("spawn")
    if spawn is not None:
        if not isinstance(spawn, list) or len(spawn) > MAX_SPAWN:
            raise ValueError(f"{name}: 'spawn' must be a list of at most {MAX_SPAWN} objects")
        for i, item in enumerate(spawn):
            where = f"{name}: spawn[{i}]"
            if not isinstance(item, dict):
                raise ValueError(f"{where} must be an object {{pipeline, title, ...}}")
            unknown = sorted(set(item) - set(_SPAWN_KEYS))
            if unknown:
                raise ValueError(
                    f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                    f"(allowed: {', '.join(_SPAWN_KEYS)})"
                )
            for key in ("pipeline", "title"):
                if not isinstance(item.get(key), str) or not item[key]:
                    raise ValueError(f"{where}: {key!r} must be a non-empty string")
            if not isinstance(item.get("wait", True), bool):
                raise ValueError(f"{where}: 'wait' must be true or false")
            if not isinstance(item.get("metadata", {}), dict):
                raise ValueError(f"{where}: 'metadata' must be an object")
            if not isinstance(item.get("description", ""), str):
                raise ValueError(f"{where}: 'description' must be a string")
            priority = item.get("priority", 0)
            if not isinstance(priority, int) or isinstance(priority, bool):
                raise ValueError(f"{where}: 'priority' must be an integer")
    wait_for = doc.get("wait_for")
    if wait_for is not None and (
        not isinstance(wait_for, list) or not all(isinstance(i, str) and i for i in wait_for)
    ):
        raise ValueError(f"{name}: 'wait_for' must be a list of task ids")


async def apply_outcome(ctx: ExecutionContext, doc: dict[str, Any]) -> list[str]:
    """Write the outcome's store entries and subtasks; the ids the move then waits for."""
    for ns, keys in (doc.get("store") or {}).items():
        for key, value in keys.items():
            if value is None:
                await ctx.store.delete(ns, key)
            else:
                await ctx.store.put(ns, key, value)
    wait_for: list[str] = []
    for item in doc.get("spawn") or []:
        fields = {k: v for k, v in item.items() if k not in ("pipeline", "title", "wait")}
        child = await ctx.spawn(item["pipeline"], item["title"], **fields)
        if item.get("wait", True):
            wait_for.append(child)
    wait_for.extend(doc.get("wait_for") or [])
    return wait_for
