"""``backlog-worker check`` for a ``nullclaw`` role: can this machine run the agent at all?

One line per problem, empty when ready: the binary is found and ``nullclaw version`` answers;
the config exists and names a default model (or the role gives ``provider`` + ``model``);
nullclaw itself accepts that config (``nullclaw agent -m /help`` runs a local slash command
after loading it; ``config_probe = false`` skips this); the API key variable is set; ``curl`` is
on PATH (nullclaw sends every LLM request through it); a ``workspace_dir`` is usable; an ``mcp``
offer can start (:func:`plugins.nullclaw.mcp.offer_problems`). Nothing
here contacts the LLM provider.

It may touch ``PATH``, the ``nullclaw`` binary (``version`` and the local ``/help`` probe, run with
a temporary HOME removed after), the config file and ``workspace_dir`` (checked) and the environment
(read); never the tracker.
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

from plugins.nullclaw.home import (
    CONFIG_MAX_BYTES,
    RunPlaces,
    agent_argv,
    child_env,
    config_bytes,
    config_path,
    write_private,
)
from plugins.nullclaw.mcp import offer_problems
from plugins.nullclaw.options import NullClawOptions
from plugins.proc.process import ProcessResult, decode_output, minimal_env, run_process
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


async def _quick_run(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout_s: float
) -> ProcessResult | str:
    """Run a short command; a string says why it could not run or did not finish."""
    try:
        with anyio.fail_after(timeout_s):
            return await run_process(
                argv, cwd=cwd, env=env, max_capture_bytes=65_536, term_grace_s=1.0
            )
    except TimeoutError:
        return f"did not answer within {timeout_s:g}s"
    except ExecutorError as exc:
        return f"cannot run: {exc}"


def _last_line(res: ProcessResult) -> str:
    err = decode_output(res.stderr).strip().splitlines()
    out = decode_output(res.stdout).strip()
    return err[-1] if err else (out[:200] or "no output")


async def _version_problem(
    binary: str, tmp: Path, env: Mapping[str, str], timeout_s: float
) -> str | None:
    res = await _quick_run([binary, "version"], cwd=tmp, env=env, timeout_s=timeout_s)
    if isinstance(res, str):
        return f"`{binary} version` {res}"
    if res.returncode != 0 or not decode_output(res.stdout).strip().startswith("nullclaw "):
        return f"`{binary} version` failed (rc {res.returncode}): {_last_line(res)}"
    return None


async def _probe_problem(
    options: NullClawOptions, binary: str, tmp: Path, source: Mapping[str, str]
) -> str | None:
    """``nullclaw agent -m /help`` with the role's real config: nullclaw loads and checks the
    config (printing nothing on stdout when it rejects it, see :mod:`plugins.nullclaw.result`),
    then runs the ``/help`` slash command locally. The LLM is never called."""
    if options.home is not None:
        home = options.home
    else:
        home = tmp / "home"
        await anyio.to_thread.run_sync(write_private, config_path(home), config_bytes(options))
    workspace = tmp / "workspace"
    await anyio.Path(workspace).mkdir(mode=0o700)
    places = RunPlaces(home=home, workspace=workspace, generated=options.home is None)
    keyless = options.model_copy(update={"api_key_env": None})  # /help needs no key
    env = child_env(keyless, places, environ=source)
    argv = [binary, *agent_argv(options, "/help")[1:]]
    res = await _quick_run(argv, cwd=workspace, env=env, timeout_s=options.version_timeout_s)
    what = "the config check `nullclaw agent -m /help` (no LLM call)"
    if isinstance(res, str):
        return f"{what} {res}"
    if res.returncode == 0 and not res.stdout.strip():
        lines = [ln.strip() for ln in decode_output(res.stderr).splitlines() if ln.strip()]
        shown = "; ".join(lines[-3:]) or "(stderr was empty)"
        return f"nullclaw rejects its configuration: {shown}"
    if res.returncode != 0:
        return f"{what} failed (rc {res.returncode}): {_last_line(res)}"
    return None


def _static_config_problems(options: NullClawOptions) -> list[str]:
    if options.home is not None:
        overrides = options.provider is not None and options.model is not None
        return check_config_file(config_path(options.home), overrides_model=overrides)
    try:
        data = config_bytes(options)
    except ValueError as exc:
        return [str(exc)]
    problems = [
        f"option 'config': top-level key {key!r} is rejected by nullclaw"
        for key in _LEGACY_KEYS
        if key in json.loads(data)
    ]
    return problems


async def check_readiness(
    options: NullClawOptions, *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Every problem that would stop a run of this role, one line each (empty = ready)."""
    source = os.environ if environ is None else environ
    path_env = source.get("PATH") or os.defpath
    problems: list[str] = []
    config_problems = await anyio.to_thread.run_sync(_static_config_problems, options)
    binary = resolve_binary(options.binary, path_env)
    if binary is None:
        where = (
            "is not an executable file" if "/" in options.binary else f"not on PATH ({path_env})"
        )
        problems.append(f"nullclaw binary {options.binary!r} {where}")
    else:
        tmp = Path(await anyio.to_thread.run_sync(tempfile.mkdtemp, "", "nullclaw-check-"))
        try:
            env = minimal_env(
                options.env_passthrough, {"HOME": str(tmp), "PATH": path_env}, base=source
            )
            problem = await _version_problem(binary, tmp, env, options.version_timeout_s)
            if problem is None and not config_problems and options.config_probe:
                problem = await _probe_problem(options, binary, tmp, source)
            if problem:
                problems.append(problem)
        finally:
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(tmp, ignore_errors=True))
    problems += config_problems
    if options.api_key_env is not None and not source.get(options.api_key_env):
        problems.append(
            f"api_key_env: environment variable {options.api_key_env} is not set (or empty)"
        )
    if shutil.which("curl", path=path_env) is None:
        problems.append(
            f"curl is not on PATH ({path_env}): nullclaw sends every LLM request through curl"
        )
    problems += await anyio.to_thread.run_sync(_check_workspace_dir, options)
    if options.mcp is not None:
        problems += await anyio.to_thread.run_sync(offer_problems, options.mcp)
    return problems
