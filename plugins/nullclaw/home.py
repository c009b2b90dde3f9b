"""Where a nullclaw run lives: its private HOME (config), its workspace, its environment.

nullclaw reads its configuration only from ``$HOME/.nullclaw/config.json``, so
every run gets a HOME chosen by the executor:

* **generated** (``provider`` + ``model`` options): a fresh ``<run workdir>/nullclaw-home`` with a
  ``.nullclaw/config.json`` (mode 0600, directories 0700) built by :func:`build_config`: the
  provider (with ``base_url`` when given), ``agents.defaults.model.primary``, memory backend
  ``none`` (no ``memory/`` files in the workspace), the reliability/timeout settings given, the
  rail's MCP server bound to the run's task under ``mcp_servers`` when the role offers it
  (option ``mcp``: :mod:`plugins.nullclaw.mcp`), then the ``config`` option deep-merged on top.
  The API key is *not* written: the executor reads the variable named by ``api_key_env`` and
  hands its value to nullclaw as ``NULLCLAW_API_KEY``.
* **existing** (``home`` option): that directory, used as is; nothing is written into it.

The workspace (``NULLCLAW_WORKSPACE``, also the process's cwd) follows the ``workspace`` option:
``run`` = a fresh ``<run workdir>/workspace``; ``task`` = ``<workspace_dir>/<task id>``, kept
across the task's runs and stages; ``shared`` = ``<workspace_dir>`` itself for every run. The
HOME is never inside the workspace, so the agent's file tools do not see the config.

It may touch the run's generated HOME and workspace directories (created 0700, the config written
0600) and the environment (read: the allowlist and the key variable); an existing ``home`` is used
as is, never written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from plugins.nullclaw.mcp import server_entry
from plugins.nullclaw.options import FORBIDDEN_ENV_PREFIXES, NullClawOptions
from plugins.proc.process import minimal_env, trace_env

__all__ = [
    "CONFIG_MAX_BYTES",
    "RunPlaces",
    "agent_argv",
    "build_config",
    "child_env",
    "config_path",
    "prepare_places",
    "workspace_for",
    "write_private",
]

#: nullclaw refuses a config.json larger than this.
CONFIG_MAX_BYTES = 64 * 1024
_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, slots=True)
class RunPlaces:
    """The directories of one run: ``home`` (HOME), ``workspace`` (cwd + NULLCLAW_WORKSPACE)."""

    home: Path
    workspace: Path
    generated: bool


def config_path(home: Path) -> Path:
    """``<home>/.nullclaw/config.json``."""
    return home / ".nullclaw" / "config.json"


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def build_config(options: NullClawOptions, task_id: str | None = None) -> dict[str, Any]:
    """The config.json contents generated from a role's options (see the module docstring);
    ``task_id``: the run's task, which an ``mcp`` offer binds the rail's MCP server to."""
    if options.provider is None or options.model is None:
        raise ValueError("a generated config needs the 'provider' and 'model' options")
    provider: dict[str, Any] = {}
    if options.base_url is not None:
        provider["base_url"] = options.base_url
    config: dict[str, Any] = {
        "models": {"providers": {options.provider: provider}},
        "agents": {"defaults": {"model": {"primary": f"{options.provider}/{options.model}"}}},
        "memory": {"backend": "none", "auto_save": False},
    }
    reliability: dict[str, Any] = {}
    if options.provider_retries is not None:
        reliability["provider_retries"] = options.provider_retries
    if options.provider_backoff_ms is not None:
        reliability["provider_backoff_ms"] = options.provider_backoff_ms
    if reliability:
        config["reliability"] = reliability
    if options.message_timeout_s is not None:
        config["agent"] = {"message_timeout_secs": options.message_timeout_s}
    if options.temperature is not None:
        config["default_temperature"] = options.temperature
    if options.mcp is not None and task_id is not None:
        config["mcp_servers"] = server_entry(options.mcp, task_id)
    return _deep_merge(config, options.config)


def config_bytes(options: NullClawOptions, task_id: str | None = None) -> bytes:
    """The generated config.json as bytes; ValueError when it is over nullclaw's 64 KiB."""
    config = build_config(options, task_id)
    data = json.dumps(config, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    if len(data) > CONFIG_MAX_BYTES:
        raise ValueError(
            f"the generated config.json is {len(data)} bytes; nullclaw reads at most "
            f"{CONFIG_MAX_BYTES} (shrink the 'config' option)"
        )
    return data


def agent_argv(options: NullClawOptions, message: str) -> list[str]:
    """``nullclaw agent [overrides] -m <message>``.

    With an existing ``home`` the role's provider/model/temperature are command-line overrides;
    a generated config already holds them.
    """
    argv = [options.binary, "agent"]
    if options.home is not None:
        if options.provider is not None:
            argv += ["--provider", options.provider]
        if options.model is not None:
            argv += ["--model", options.model]
        if options.temperature is not None:
            argv += ["--temperature", repr(float(options.temperature))]
    return [*argv, "-m", message]


def workspace_for(options: NullClawOptions, *, workdir: Path, task_id: str) -> Path:
    """The run's workspace directory according to the ``workspace`` policy."""
    if options.workspace == "run":
        return workdir / "workspace"
    assert options.workspace_dir is not None
    if options.workspace == "shared":
        return options.workspace_dir
    name = task_id
    if not _SAFE_COMPONENT.fullmatch(name):
        # not usable as one path component: a stable, collision-free stand-in
        name = "task-" + hashlib.sha256(task_id.encode("utf-8", "replace")).hexdigest()[:32]
    return options.workspace_dir / name


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by us only (0600; parents created 0700). Blocking."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)


def _prepare(options: NullClawOptions, workdir: Path, task_id: str) -> RunPlaces:
    workspace = workspace_for(options, workdir=workdir, task_id=task_id)
    workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    if options.home is not None:
        return RunPlaces(home=options.home, workspace=workspace, generated=False)
    home = workdir / "nullclaw-home"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(config_path(home), config_bytes(options, task_id))
    return RunPlaces(home=home, workspace=workspace, generated=True)


async def prepare_places(options: NullClawOptions, *, workdir: Path, task_id: str) -> RunPlaces:
    """Create the run's workspace and (generated mode) its HOME + config, in a worker thread.

    Raises OSError / ValueError; the executor turns them into a failure.
    """
    return await anyio.to_thread.run_sync(_prepare, options, workdir, task_id)


def child_env(
    options: NullClawOptions,
    places: RunPlaces,
    *,
    environ: Mapping[str, str] | None = None,
    traceparent: str | None = None,
) -> dict[str, str]:
    """nullclaw's whole environment: PATH/LANG, the passthrough allowlist, HOME, workspace, key,
    and ``TRACEPARENT`` (the run's trace context, when the worker traces).

    Built from scratch (:func:`plugins.proc.process.minimal_env`), so nothing else of the worker's
    environment (tracker tokens included) reaches nullclaw. Raises KeyError naming the
    ``api_key_env`` variable when it is not set.
    """
    source = os.environ if environ is None else environ
    extra = {"HOME": str(places.home), "NULLCLAW_WORKSPACE": str(places.workspace)}
    if options.api_key_env is not None:
        if not source.get(options.api_key_env):
            raise KeyError(options.api_key_env)
        extra["NULLCLAW_API_KEY"] = source[options.api_key_env]
    extra.update(trace_env(traceparent))
    env = minimal_env(options.env_passthrough, extra, base=source)
    return {k: v for k, v in env.items() if not k.upper().startswith(FORBIDDEN_ENV_PREFIXES)}
