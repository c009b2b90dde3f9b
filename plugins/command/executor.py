"""The ``command`` executor: run a program per task, exit code -> trigger.

Options: a role's ``[roles.options]`` table (``argv``, ``env``, ``env_passthrough``, ``stdin``,
``task_file``, ``exit_codes``, ``retryable_exit_codes``, ``timeout_s``, ``term_grace_s``,
``tail_bytes``, ``stream_output``, ``stream_limit_bytes``, ``cwd``, ``artifacts_dir``), every one
checked when the worker starts: see :mod:`plugins.command.options`.

Placeholders (in ``argv`` items, ``env`` values and ``cwd``): ``{task.id}``, ``{task.title}``,
``{task.description}``, ``{task.stage}``, ``{task.pipeline_id}``, ``{task.priority}``,
``{task.metadata[key]}``, ``{run.id}``, ``{run.agent_id}``, ``{run.agent_role}``, ``{attempt}``,
``{workdir}``, ``{task_file}``, ``{instructions}``, ``{store.<namespace>.<key>}`` (read from
the rail's store at the start); ``{{``/``}}`` are literal braces. Each one
becomes exactly one piece of one argument: no shell, no splitting, no attribute lookups. (An
inline script such as ``python3 -c "..."`` must double its own braces.)

The child runs in the run's working directory (unless ``cwd``) with a scrubbed environment
(:func:`minimal_env`) plus ``BACKLOG_TASK_ID``, ``BACKLOG_RUN_ID``, ``BACKLOG_ATTEMPT``,
``BACKLOG_WORKDIR``, ``BACKLOG_TASK_FILE`` (when ``task_file``) and ``TRACEPARENT`` (when the
worker traces: the run span's W3C trace context, for the child's own spans). If it writes
``<workdir>/outcome.json`` (``{"trigger": "...", "instructions": "...", "usage": ..., "result":
...}``, every key optional), a mapped exit code uses that trigger instead; its ``result`` (any JSON
value) is the task's result (:func:`plugins.results.record_result`); its ``artifacts`` list
(``[{"path": "out/report.md", "kind": "report", "meta": {...}}]``, paths inside the workdir) is
recorded, hashed and sized (see :mod:`plugins.command.outcome`), each copied first to
``<artifacts_dir>/<task id>/<run id>/<path>``, so its ``file://`` uri names a file that outlives the
run's directory (removed when the run ends unless ``keep_workdirs``); without ``artifacts_dir`` that
is :func:`~plugins.artifact_files.default_artifacts_dir` (``$STATE_DIRECTORY/artifacts`` under
systemd, else ``~/.local/share/backlog-worker/artifacts``), and ``artifacts_dir = false`` leaves
them in the run's directory.
As an agent (the store, subtasks with ``wait_for``, ``checkpoint.json``, ``upstream.json``): see
:mod:`plugins.command.agent`. Cancellation kills the whole process group.

It may touch the child (through :func:`~plugins.proc.process.run_process`), ``PATH`` (to find the
program), the run's working directory (``task.json``, ``outcome.json``) and the context's reports
and artifacts; never the tracker, the lease or the worker.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import anyio

from plugins.api import ExecutionContext, Failure, NamedTrigger, Outcome, Transition
from plugins.command.agent import (
    apply_outcome,
    read_store_fields,
    save_checkpoint_file,
    write_inputs,
)
from plugins.command.options import CommandOptions, parse_options
from plugins.command.outcome import (
    OUTCOME_FILE,
    read_outcome_file,
    record_artifacts,
    resolve_artifacts,
)
from plugins.command.stream import OutputStream
from plugins.command.template import TemplateValues
from plugins.proc.process import ProcessResult, SpawnError, minimal_env, run_process, trace_env
from plugins.results import record_result
from tracker_client.errors import NotFound, TrackerError

__all__ = ["CommandExecutor", "CommandOptions", "read_outcome_file", "task_json"]

TASK_FILE = "task.json"


def task_json(ctx: ExecutionContext) -> bytes:
    """The JSON a command gets (stdin or ``task.json``): task, run, attempt, instructions, workdir.

    Holds no lease token: :class:`~tracker_client.models.Run` and ``Task`` carry none.
    """
    doc = {
        "task": ctx.task.model_dump(mode="json"),
        "run": ctx.run.model_dump(mode="json"),
        "attempt": ctx.attempt,
        "instructions": ctx.instructions,
        "workdir": str(ctx.workdir),
    }
    return json.dumps(doc, ensure_ascii=False, indent=2).encode()


def _check_program(program: str, path_env: str) -> list[str]:
    if os.sep in program:
        if os.path.isfile(program) and os.access(program, os.X_OK):
            return []
        return [f"command {program!r} is not an executable file"]
    if shutil.which(program, path=path_env) is None:
        return [f"command {program!r} was not found on PATH ({path_env})"]
    return []


class CommandExecutor:
    """Runs ``argv`` (rendered from the task) in the run's working directory.

    Outcome: an exit code listed in ``exit_codes`` -> :class:`Transition` with its trigger
    (``outcome.json`` may override it); any other code, or death by a signal -> :class:`Failure`
    carrying the code/signal and the stderr tail.
    """

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options: CommandOptions = parse_options(options)

    @property
    def program(self) -> str:
        """argv[0] as configured (may hold placeholders)."""
        return self.options.argv_templates[0].source

    def triggers(self) -> list[NamedTrigger]:
        """The triggers ``exit_codes`` names (an ``outcome.json`` may name others, unseen)."""
        return [
            NamedTrigger(trigger, f'exit_codes "{code}"')
            for code, trigger in sorted(self.options.exit_codes.items())
            if trigger is not None
        ]

    async def readiness(self) -> list[str]:
        """Check that argv[0] resolves to an executable file and a fixed ``cwd`` exists
        (templated values can only be checked per task)."""
        problems: list[str] = []
        opts = self.options
        if not opts.argv_templates[0].has_fields:
            path_env = minimal_env(opts.env_passthrough)["PATH"]
            problems += await anyio.to_thread.run_sync(_check_program, self.program, path_env)
        if opts.cwd_template is not None and not opts.cwd_template.has_fields:
            cwd = opts.base_dir / opts.cwd_template.source.replace("{{", "{").replace("}}", "}")
            if not await anyio.Path(cwd).is_dir():
                problems.append(f"command option 'cwd': {cwd} is not a directory")
        return problems

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        """Run the command once for ``ctx`` and map how it ended to an outcome."""
        opts = self.options
        payload = task_json(ctx) if (opts.task_file or opts.stdin_task_json) else b""
        task_file = ctx.workdir / TASK_FILE if opts.task_file else None
        if task_file is not None:
            await anyio.Path(task_file).write_bytes(payload)
        templates = [*opts.argv_templates, *opts.env_templates.values()]
        if opts.cwd_template is not None:
            templates.append(opts.cwd_template)
        store = await read_store_fields(ctx, templates) if opts.uses_store else None
        written = None
        if ctx.previous_checkpoint is not None or ctx.upstream:
            written = await anyio.to_thread.run_sync(write_inputs, ctx, ctx.workdir)
        values = TemplateValues(ctx, task_file, store)
        try:
            argv = [t.render(values) for t in opts.argv_templates]
            extra = {name: t.render(values) for name, t in opts.env_templates.items()}
            template = opts.cwd_template
            cwd = ctx.workdir if template is None else opts.base_dir / template.render(values)
        except KeyError as exc:
            return Failure(
                reason="bad_task_input",
                message=str(exc.args[0]),
                retryable=False,
            )
        extra.update(
            {
                "BACKLOG_TASK_ID": ctx.task.id,
                "BACKLOG_RUN_ID": ctx.run.id,
                "BACKLOG_ATTEMPT": str(ctx.attempt),
                "BACKLOG_WORKDIR": str(ctx.workdir),
            }
        )
        if task_file is not None:
            extra["BACKLOG_TASK_FILE"] = str(task_file)
        extra.update(trace_env(ctx.traceparent))  # the run's trace, when the worker traces
        env = minimal_env(opts.env_passthrough, extra)
        out = OutputStream(
            "stdout", ctx, opts.tail_bytes, opts.stream_output, opts.stream_limit_bytes
        )
        err = OutputStream(
            "stderr", ctx, opts.tail_bytes, opts.stream_output, opts.stream_limit_bytes
        )
        result: ProcessResult | None = None
        try:
            with anyio.move_on_after(opts.timeout_s):
                result = await run_process(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=payload if opts.stdin_task_json else None,
                    on_stdout=out,
                    on_stderr=err,
                    max_capture_bytes=opts.tail_bytes,
                    term_grace_s=opts.term_grace_s,
                )
        except SpawnError as error:
            return Failure(
                reason="spawn_failed",
                message=str(error),
                retryable=not error.permanent,
                details={"argv0": argv[0], "spawn_error": error.reason},
            )
        await out.finish()
        await err.finish()
        try:  # however the child ended, a checkpoint it wrote is kept for the next attempt
            await save_checkpoint_file(ctx, ctx.workdir, written)
        except ValueError as exc:
            return Failure(
                reason="bad_executor_output",
                message=f"command {argv[0]!r}: {exc}",
                retryable=False,
            )
        tails = {
            "stdout_tail": out.tail_text(),
            "stderr_tail": err.tail_text(),
            "stdout_bytes": out.total,
            "stderr_bytes": err.total,
        }
        if result is None:
            await ctx.report("exit", {"timed_out": True, **tails}, flush=True)
            return Failure(
                reason="timeout",
                message=f"command {argv[0]!r} did not finish within {opts.timeout_s:g}s "
                "(its process group was killed)",
                retryable=True,
                details=tails,
            )
        await ctx.report(
            "exit",
            {
                "returncode": result.returncode,
                "signal": result.signal,
                "duration_s": round(result.duration_s, 3),
                **tails,
            },
            flush=True,
        )
        return await self._outcome(ctx, argv[0], result, tails)

    async def _outcome(
        self, ctx: ExecutionContext, program: str, result: ProcessResult, tails: dict[str, Any]
    ) -> Outcome:
        opts = self.options
        details = {"returncode": result.returncode, "signal": result.signal, **tails}
        last_err = tails["stderr_tail"].strip().splitlines()[-1:] or [""]
        if result.signal is not None:
            return Failure(
                reason="killed",
                message=f"command {program!r} was killed by signal {result.signal}",
                retryable=True,
                details=details,
            )
        if result.returncode not in opts.exit_codes:
            retryable = (
                opts.retryable_exit_codes is None or result.returncode in opts.retryable_exit_codes
            )
            mapped = ", ".join(str(c) for c in sorted(opts.exit_codes))
            suffix = f": {last_err[0]}" if last_err[0] else ""
            return Failure(
                reason="exit_code",
                message=f"command {program!r} exited with status {result.returncode} "
                f"(exit codes mapped to success: {mapped}){suffix}",
                retryable=retryable,
                details=details,
            )
        try:
            doc = await anyio.to_thread.run_sync(read_outcome_file, ctx.workdir / OUTCOME_FILE)
        except ValueError as exc:
            return Failure(
                reason="bad_executor_output",
                message=f"command {program!r}: {exc}",
                retryable=False,
                details=details,
            )
        trigger = opts.exit_codes[result.returncode]
        source = f"exit code {result.returncode} of command {program!r}"
        if doc is None:
            return Transition(trigger=trigger, source=source)
        declared = doc.get("artifacts") or []
        try:
            resolved = await anyio.to_thread.run_sync(resolve_artifacts, ctx.workdir, declared)
            await record_artifacts(ctx, declared, resolved, opts.artifacts_path)
        except ValueError as exc:  # a bad declaration: the same output would fail again
            return Failure(
                reason="bad_executor_output",
                message=f"command {program!r}: {exc}",
                retryable=False,
                details=details,
            )
        except OSError as exc:  # vanished, unreadable, or the copy could not be written
            return Failure(
                reason="artifact_failed",
                message=f"command {program!r}: {OUTCOME_FILE} artifact: {exc}",
                retryable=True,
                details=details,
            )
        try:
            wait_for = await apply_outcome(ctx, doc)
        except (ValueError, TrackerError) as exc:  # a bad value, an unknown pipeline
            return Failure(
                reason="bad_executor_output",
                message=f"command {program!r}: {OUTCOME_FILE}: {exc}",
                retryable=not isinstance(exc, ValueError | NotFound),
                details=details,
            )
        if "result" in doc:  # last: a result is kept only when the rest of the file was
            failure = await record_result(
                ctx,
                doc["result"],
                source=f"command {program!r}: {OUTCOME_FILE}",
                artifacts_dir=opts.artifacts_path,
            )
            if failure is not None:
                return replace(failure, details=details)
        if doc.get("trigger"):
            source = f"{OUTCOME_FILE} of command {program!r}"
        return Transition(
            trigger=doc.get("trigger") or trigger,
            instructions=doc.get("instructions"),
            usage=doc.get("usage"),
            source=source,
            wait_for=wait_for,
        )
