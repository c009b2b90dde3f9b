"""``backlog-worker check`` for a ``nullclaw`` role: can this machine run the agent at all?

One line per problem, empty when ready: the binary is found and ``nullclaw version`` answers;
the config exists and names a default model (or the role gives ``provider`` + ``model``); the
API key variable is set; ``curl`` is on PATH (nullclaw sends every LLM request through it);
a ``workspace_dir`` is usable. Nothing here contacts the LLM provider.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from plugins.nullclaw_home import CONFIG_MAX_BYTES, config_bytes, config_path
from plugins.nullclaw_options import NullClawOptions
from plugins.proc import minimal_env, run_process
from tracker_client.errors import ExecutorError

__all__ = ["check_config_file", "check_readiness", "resolve_binary"]

_LEGACY_KEYS = ("default_provider", "default_model")


def resolve_binary(binary: str, path: str) -> str | None:
    """Absolute path of an executable ``binary`` (a name searched on ``path``, or a path)."""
    if "/" in binary:
        candidate = os.path.abspath(binary)
        return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    return shutil.which(binary, path=path)


def check_config_file(path: Path, *, overrides_model: bool) -> list[str]:
    """Problems with an existing config.json (blocking file reads: call in a thread)."""
    where = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [f"nullclaw config {where} does not exist (nullclaw would exit 0 doing nothing)"]
    except OSError as exc:
        return [f"nullclaw config {where} cannot be read: {exc.strerror or exc}"]
    if len(raw) > CONFIG_MAX_BYTES:
        return [f"nullclaw config {where} is {len(raw)} bytes; nullclaw reads at most 64 KiB"]
    try:
        data: Any = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [f"nullclaw config {where} is not valid JSON: {exc}"]
    if not isinstance(data, dict):
        return [f"nullclaw config {where} must hold a JSON object"]
    problems = [
        f"nullclaw config {where}: legacy top-level key {key!r} is rejected by nullclaw; use "
        "agents.defaults.model.primary"
        for key in _LEGACY_KEYS
        if key in data
    ]
    primary: Any = data
    for key in ("agents", "defaults", "model", "primary"):
        primary = primary.get(key) if isinstance(primary, dict) else None
    if primary is None:
        if not overrides_model:
            problems.append(
                f"nullclaw config {where} has no default model (agents.defaults.model.primary); "
                "set it to '<provider>/<model>' or give the role 'provider' and 'model'"
            )
    elif not isinstance(primary, str) or "/" not in primary.strip("/"):
        problems.append(
            f"nullclaw config {where}: agents.defaults.model.primary must look like "
            f"'<provider>/<model>', got {primary!r}"
        )
    return problems


def _check_workspace_dir(options: NullClawOptions) -> list[str]:
    wdir = options.workspace_dir
    if options.workspace == "run" or wdir is None:
        return []
    probe = wdir
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return [f"workspace_dir {str(wdir)!r}: {str(probe)!r} is not a directory"]
    if not os.access(probe, os.W_OK | os.X_OK):
        return [f"workspace_dir {str(wdir)!r}: {str(probe)!r} is not writable"]
    return []


async def _version_problem(
    binary: str, options: NullClawOptions, source: Mapping[str, str], path_env: str
) -> str | None:
    tmp = Path(await anyio.to_thread.run_sync(tempfile.mkdtemp, "", "nullclaw-check-"))
    try:
        home = options.home if options.home is not None else tmp
        env = minimal_env(
            options.env_passthrough, {"HOME": str(home), "PATH": path_env}, base=source
        )
        try:
            with anyio.fail_after(options.version_timeout_s):
                res = await run_process(
                    [binary, "version"],
                    cwd=tmp,
                    env=env,
                    max_capture_bytes=65_536,
                    term_grace_s=1.0,
                )
        except TimeoutError:
            return f"`{binary} version` did not answer within {options.version_timeout_s:g}s"
        except ExecutorError as exc:
            return f"`{binary} version` cannot run: {exc}"
        out = res.stdout.decode("utf-8", "replace").strip()
        if res.returncode != 0 or not out.startswith("nullclaw "):
            err = res.stderr.decode("utf-8", "replace").strip().splitlines()
            why = err[-1] if err else (out[:200] or "no output")
            return f"`{binary} version` failed (rc {res.returncode}): {why}"
        return None
    finally:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(tmp, ignore_errors=True))


async def check_readiness(
    options: NullClawOptions, *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Every problem that would stop a run of this role, one line each (empty = ready)."""
    source = os.environ if environ is None else environ
    path_env = source.get("PATH") or os.defpath
    problems: list[str] = []
    binary = resolve_binary(options.binary, path_env)
    if binary is None:
        where = (
            "is not an executable file" if "/" in options.binary else f"not on PATH ({path_env})"
        )
        problems.append(f"nullclaw binary {options.binary!r} {where}")
    else:
        problem = await _version_problem(binary, options, source, path_env)
        if problem:
            problems.append(problem)
    if options.home is not None:
        overrides = options.provider is not None and options.model is not None
        problems += await anyio.to_thread.run_sync(
            lambda: check_config_file(
                config_path(options.home or Path()), overrides_model=overrides
            )
        )
    else:
        try:
            config_bytes(options)
        except ValueError as exc:
            problems.append(str(exc))
    if options.api_key_env is not None and not source.get(options.api_key_env):
        problems.append(
            f"api_key_env: environment variable {options.api_key_env} is not set (or empty)"
        )
    if shutil.which("curl", path=path_env) is None:
        problems.append(
            f"curl is not on PATH ({path_env}): nullclaw sends every LLM request through curl"
        )
    problems += await anyio.to_thread.run_sync(_check_workspace_dir, options)
    return problems
