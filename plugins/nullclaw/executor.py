"""The ``nullclaw`` executor: one ``nullclaw agent -m <message>`` subprocess per claimed task.

The NullClaw CLI is hostile to naive wrapping; this executor handles it:

* a private HOME with a generated ``.nullclaw/config.json`` (or an existing HOME), an absolute
  ``NULLCLAW_WORKSPACE`` per the workspace policy, and an environment built from scratch (an
  allowlist; never the tracker's tokens; ``TRACEPARENT`` when the worker traces the run) --
  :mod:`plugins.nullclaw.home`;
* a prompt rendered from a documented template, never beginning with ``/``, handed over in a
  workspace file so ``ps`` never shows it (inline ``-m`` up to ``max_prompt_arg_bytes``) --
  :mod:`plugins.nullclaw.prompt`;
* stdin ``/dev/null``, pipes read concurrently, its own process group killed as a whole
  (TERM, grace, KILL) on timeout, lease loss, cancel and shutdown -- :mod:`plugins.proc.process`;
  streaming output forwarded as batched ``progress`` events -- :mod:`plugins.nullclaw.progress`;
* success only with rc 0 and a ``Sending to `` header; every other ending is a failure with a
  stable reason and the right ``retryable`` -- :mod:`plugins.nullclaw.result`;
* ``readiness()`` for ``backlog-worker check`` -- :mod:`plugins.nullclaw.readiness`.

A successful answer is written to ``<workspace>/.backlog-worker/answer-<run id>.md`` (or
``<answers_dir>/<task id>/answer-<run id>.md``), recorded as a ``file`` artifact (sha256, size)
and its head is reported in a ``result`` event.

It may touch the ``nullclaw`` child (through :mod:`plugins.proc.process`), its HOME and workspace
(:mod:`plugins.nullclaw.home`), the prompt and answer files and the context's reports; never the
tracker or the lease: everything goes through the :class:`~plugins.api.ExecutionContext`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from plugins.agent import AgentUnsupported
from plugins.api import ExecutionContext, Failure, NamedTrigger, Outcome, Transition
from plugins.nullclaw.home import agent_argv, child_env, prepare_places, write_private
from plugins.nullclaw.memory import keep_partial, recall, remember, resume_text
from plugins.nullclaw.options import NullClawOptions, load_template, parse_options
from plugins.nullclaw.progress import ProgressForwarder
from plugins.nullclaw.prompt import (
    PromptPlan,
    PromptTooLarge,
    check_template,
    plan_prompt,
    render_prompt,
)
from plugins.nullclaw.readiness import check_readiness
from plugins.nullclaw.redact import run_secrets
from plugins.nullclaw.result import Answer, classify, find_verdict
from plugins.proc.process import ProcessResult, SpawnError, run_process
from plugins.proc.redact import Redactor
from tracker_client.errors import ExecutorError, TrackerError

__all__ = ["NullClawExecutor"]

_OUTPUT_DIR = ".backlog-worker"
#: nullclaw's own header lines, not part of its answer (taken off a partial answer).
_HEADER = re.compile(r"^(Sending to [^\n]*\n|Session: [^\n]*\n)+")
# our own logger, not ctx.logger: a LoggerAdapter (the worker's) would drop our "action" extra
log = logging.getLogger("backlog_worker.executor.nullclaw")


def _save_answer(path: Path, data: bytes) -> str:
    write_private(path, data)
    return hashlib.sha256(data).hexdigest()


def _safe(name: str) -> str:
    """One harmless path component: no separators, never ``.``/``..``, never hidden."""
    return re.sub(r"^\.", "_", re.sub(r"[^A-Za-z0-9._-]", "_", name)) or "_"


def _spawn_failure(exc: ExecutorError, binary: str) -> Failure:
    reason = exc.reason if isinstance(exc, SpawnError) else "os_error"
    return Failure(
        "nullclaw_not_started",
        f"nullclaw could not be started: {exc}",
        # a missing binary or an oversized argv/environment needs fixing; an OS hiccup may pass
        retryable=reason in ("os_error", "cwd_missing"),
        details={"binary": binary, "spawn_error": reason},
    )


class NullClawExecutor:
    """Runs the NullClaw agent CLI for each task (options: docs/executors/nullclaw.md).

    The factory named by the ``nullclaw`` entry point: ``NullClawExecutor(role_options)``.
    Bad options raise :class:`~tracker_client.errors.ExecutorError` naming the option.
    """

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        opts = parse_options(options or {})
        if "/" in opts.binary and not os.path.isabs(opts.binary):
            # the process runs in its workspace: pin a relative path to the worker's cwd now
            opts = opts.model_copy(update={"binary": os.path.abspath(opts.binary)})
        self.options: NullClawOptions = opts
        self._template = load_template(opts)
        check_template(self._template)

    def __repr__(self) -> str:
        return f"NullClawExecutor(binary={self.options.binary!r}, model={self.options.model!r})"

    def triggers(self) -> list[NamedTrigger]:
        """The triggers its verdict words map to, and ``verdict_fallback_trigger``."""
        named = [NamedTrigger(t, f"triggers.{word}") for word, t in self.options.triggers.items()]
        fallback = self.options.verdict_fallback_trigger
        if fallback is not None:
            named.append(NamedTrigger(fallback, "verdict_fallback_trigger"))
        return named

    async def readiness(self) -> list[str]:
        """One line per problem that would stop a run (empty when ready)."""
        return await check_readiness(self.options)

    # -- one run ----------------------------------------------------------------------------------
    async def execute(self, ctx: ExecutionContext) -> Outcome:
        """Run nullclaw once for ``ctx.task`` and turn its ending into an outcome."""
        opts = self.options
        log_extra = {"task_id": ctx.task.id, "run_id": ctx.run.id}
        try:
            places = await prepare_places(opts, workdir=ctx.workdir, task_id=ctx.task.id)
        except ValueError as exc:
            return Failure("nullclaw_config_error", str(exc), retryable=False)
        except OSError as exc:
            return Failure(
                "nullclaw_setup_failed",
                f"cannot prepare nullclaw's home/workspace: {exc}",
                retryable=True,
            )
        memory = await self._recall(ctx)
        resume = resume_text(ctx.previous_checkpoint) if opts.resume else ""
        prompt = render_prompt(
            self._template,
            title=ctx.task.title,
            description=ctx.task.description,
            metadata=ctx.task.metadata,
            instructions=ctx.instructions,
            task_id=ctx.task.id,
            run_id=ctx.run.id,
            attempt=ctx.attempt,
            stage=ctx.task.stage,
            pipeline_id=ctx.task.pipeline_id,
            workspace=places.workspace,
            triggers=opts.triggers,
            memory=memory,
            resume=resume,
        )
        try:
            plan = plan_prompt(
                prompt,
                limit=opts.max_prompt_arg_bytes,
                policy=opts.oversized_prompt,
                workspace=places.workspace,
                run_id=ctx.run.id,
            )
        except PromptTooLarge as exc:
            return Failure(
                "prompt_too_large",
                str(exc),
                retryable=False,
                details={"prompt_bytes": exc.size, "limit_bytes": exc.limit},
            )
        try:
            env = child_env(opts, places, traceparent=ctx.traceparent)
        except KeyError as exc:
            return Failure(
                "nullclaw_config_error",
                f"api_key_env: environment variable {exc.args[0]} is not set (or empty)",
                retryable=False,
            )
        if plan.file is not None:
            await anyio.to_thread.run_sync(write_private, plan.file, plan.prompt.encode("utf-8"))
        log.info(
            "starting nullclaw for task %s (prompt %d bytes%s)",
            ctx.task.id,
            len(plan.prompt.encode("utf-8")),
            ", via file" if plan.file else "",
            extra={"action": "nullclaw_started", **log_extra},
        )
        try:
            return await self._run(ctx, plan, places.workspace, env)
        finally:
            if plan.file is not None:  # read by now; a kept workspace must not collect prompts
                with contextlib.suppress(OSError):
                    plan.file.unlink()

    async def _recall(self, ctx: ExecutionContext) -> str:
        """The memory block for the prompt; a store that cannot be read is logged, not fatal."""
        if self.options.memory is None:
            return ""
        try:
            return await recall(ctx, self.options.memory)
        except (TrackerError, AgentUnsupported) as exc:
            log.warning(
                "nullclaw memory not read: %s",
                exc,
                extra={"action": "nullclaw_memory_failed", "task_id": ctx.task.id},
            )
            return ""

    async def _keep_partial(self, ctx: ExecutionContext, tail: str, workspace: Path) -> None:
        """Checkpoint what nullclaw said before it failed or was cut off (option ``resume``)."""
        if not self.options.resume:
            return
        kept = None if self.options.workspace == "run" else str(workspace)
        text = _HEADER.sub("", tail)
        try:
            await keep_partial(ctx, text, kept)
        except (ValueError, AgentUnsupported) as exc:
            log.warning("nullclaw partial answer not kept: %s", exc)

    async def _run(
        self, ctx: ExecutionContext, plan: PromptPlan, workspace: Path, env: dict[str, str]
    ) -> Outcome:
        forwarders: list[ProgressForwarder] = []  # this run's (the executor serves many runs)
        try:
            return await self._run_once(ctx, plan, workspace, env, forwarders)
        except anyio.get_cancelled_exc_class():
            # cut off (lease lost, shutdown): the checkpoint is kept in memory, and the report
            # (which still runs) writes it
            if forwarders:
                with anyio.CancelScope(shield=True):
                    await self._keep_partial(ctx, forwarders[0].tail("stdout"), workspace)
            raise

    async def _run_once(
        self,
        ctx: ExecutionContext,
        plan: PromptPlan,
        workspace: Path,
        env: dict[str, str],
        forwarders: list[ProgressForwarder],
    ) -> Outcome:
        opts = self.options
        limit = opts.timeout_s
        remaining = ctx.time_remaining()
        if remaining is not None:
            limit = min(limit, remaining)
        # the provider key, and what the allowlist let through that looks like a secret
        redactor = Redactor(run_secrets(env, opts.env_passthrough))
        forwarder = ProgressForwarder(
            ctx,
            interval_s=opts.progress_interval_s,
            chunk_chars=opts.progress_chunk_bytes,
            max_chars=opts.progress_max_bytes,
            forward_stderr=opts.progress_stderr,
            redactor=redactor,
        )
        forwarders.append(forwarder)
        result: ProcessResult | None = None
        spawn_error: ExecutorError | None = None
        async with anyio.create_task_group() as tg:
            await tg.start(forwarder.run)
            with anyio.move_on_after(limit) as timeout_scope:
                try:
                    result = await run_process(
                        agent_argv(opts, plan.message),
                        cwd=workspace,
                        env=env,
                        on_stdout=forwarder.on_stdout,
                        on_stderr=forwarder.on_stderr,
                        max_capture_bytes=opts.max_output_bytes,
                        term_grace_s=opts.kill_grace_s,
                    )
                except ExecutorError as exc:
                    spawn_error = exc
            tg.cancel_scope.cancel()
        await forwarder.flush_quietly(final=True)
        tokens = forwarder.tokens.total(forwarder.tail("stdout"))
        if tokens:  # what nullclaw printed of its usage, timed out or not (.usage)
            ctx.report_cost(tokens=tokens)
        if spawn_error is not None:
            return _spawn_failure(spawn_error, opts.binary)
        if result is None or timeout_scope.cancelled_caught:
            log.warning(
                "nullclaw timed out after %.1fs; its process group was killed",
                limit,
                extra={"action": "nullclaw_timeout", "task_id": ctx.task.id, "run_id": ctx.run.id},
            )
            await self._keep_partial(ctx, forwarder.tail("stdout"), workspace)
            return Failure(
                "timeout",
                f"nullclaw did not finish within {limit:g}s; its process group was killed",
                retryable=True,
                details={
                    "timeout_s": limit,
                    "stdout_tail": forwarder.tail("stdout")[-2000:],
                    "stderr_tail": forwarder.tail("stderr")[-2000:],
                },
            )
        outcome = classify(
            returncode=result.returncode,
            signum=result.signal,
            stdout=result.stdout,
            stderr=result.stderr,
            retryable_errors=opts.retryable_errors,
        )
        if isinstance(outcome, Failure):
            if redactor:
                outcome = replace(
                    outcome,
                    message=redactor.text(outcome.message),
                    details=redactor.data(dict(outcome.details)),
                )
            log.warning(
                "nullclaw failed: %s",
                outcome.message,
                extra={
                    "action": "nullclaw_failed",
                    "reason": outcome.reason,
                    "task_id": ctx.task.id,
                    "run_id": ctx.run.id,
                },
            )
            if outcome.retryable:
                await self._keep_partial(ctx, forwarder.tail("stdout"), workspace)
            return outcome
        if redactor:
            outcome = replace(outcome, text=redactor.text(outcome.text))
        return await self._succeed(ctx, outcome, result, workspace)

    async def _succeed(
        self, ctx: ExecutionContext, answer: Answer, result: ProcessResult, workspace: Path
    ) -> Outcome:
        opts = self.options
        if not answer.text.strip():
            return Failure(
                "nullclaw_empty_answer",
                "nullclaw succeeded but its answer is empty",
                retryable=True,
                details={"header": answer.header},
            )
        trigger: str | None = None
        verdict: str | None = None
        if opts.triggers:
            found = find_verdict(answer.text, opts.triggers)
            if found is not None:
                verdict, trigger = found
            elif opts.verdict_fallback_trigger is not None:
                trigger = opts.verdict_fallback_trigger
            else:
                return Failure(
                    "nullclaw_no_verdict",
                    "the answer names no verdict (expected a final line with one of: "
                    f"{', '.join(opts.triggers)})",
                    retryable=True,
                    details={"answer_tail": answer.text[-1000:]},
                )
        data = answer.text.encode("utf-8")
        name = f"answer-{_safe(ctx.run.id)}.md"
        if opts.answers_dir is not None:
            path = opts.answers_dir / _safe(ctx.task.id) / name
        else:
            path = workspace / _OUTPUT_DIR / name
        digest = await anyio.to_thread.run_sync(_save_answer, path, data)
        meta = {
            "name": "nullclaw answer",
            "media_type": "text/markdown",
            "truncated": result.stdout_truncated,
            "decoding_errors": answer.decoding_errors,
            "header": answer.header,
        }
        artifact_id = await ctx.artifact(
            kind="file", uri=path.as_uri(), sha256=digest, size_bytes=len(data), meta=meta
        )
        head = answer.text[: opts.result_head_chars]
        await ctx.report(
            "result",
            {
                "answer_head": head,
                "answer_head_truncated": len(head) < len(answer.text),
                "answer_bytes": len(data),
                "output_truncated": result.stdout_truncated,
                "artifact_id": artifact_id,
                "uri": path.as_uri(),
                "sha256": digest,
                "verdict": verdict,
                "trigger": trigger,
                "duration_s": round(result.duration_s, 3),
            },
            flush=True,
        )
        if opts.memory is not None:
            try:
                await remember(ctx, opts.memory, answer.text)
            except (TrackerError, AgentUnsupported, ValueError) as exc:
                log.warning("nullclaw answer not written to memory: %s", exc)
        log.info(
            "nullclaw answered for task %s (%d bytes)",
            ctx.task.id,
            len(data),
            extra={"action": "nullclaw_succeeded", "task_id": ctx.task.id, "run_id": ctx.run.id},
        )
        return Transition(
            trigger=trigger,
            usage={"wall_time_s": round(result.duration_s, 3), "answer_bytes": len(data)},
        )
