"""``backlog-worker demo``: watch tasks flow through a temporary rail, no configuration needed.

The demo creates an embedded rail in a temporary directory, a ``draft -> review -> done``
pipeline with a reject loop (``review -> draft``) and a dead-letter stage, ~30 tasks whose
metadata decides how they behave (some fail and are retried, some are rejected once and
reworked, one always fails and is dead-lettered), then starts several ``backlog-worker run``
processes that share the rail, using the ``command`` executor with small Python scripts. It
shows live progress and ends with a summary table.

It may touch its own directory (a temporary one, or ``--keep-dir``: the rail, the worker configs,
the scripts and their logs), the embedded rail it creates there, the ``backlog-worker run``
processes it starts and the terminal; never a rail or configuration of the operator's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, Task, TaskCreate
from tracker_client.protocol import Tracker
from worker.cli.ops.common import EXIT_USAGE, OpsError, SafeConsole
from worker.demo_summary import DemoSummary, render_summary, summarise

__all__ = ["PIPELINE", "DemoOptions", "DemoSummary", "demo_tasks", "run_demo", "worker_config"]

#: The demo pipeline: writers draft, reviewers approve or send back, dead letters go to ``dead``.
PIPELINE: dict[str, Any] = {
    "initial": "draft",
    "states": {
        "draft": {"agent_role": "writer", "description": "write a first version"},
        "review": {"agent_role": "reviewer", "description": "approve or send back"},
        "done": {"terminal": True, "description": "approved"},
        "dead": {"terminal": True, "description": "dead letters: gave up after retries"},
    },
    "transitions": [
        {"from": "draft", "trigger": "submit", "to": "review"},
        {"from": "review", "trigger": "approve", "to": "done"},
        {
            "from": "review",
            "trigger": "reject",
            "to": "draft",
            "instructions": "address the review comments",
        },
    ],
}

#: One script for both roles (role in argv[1]); the task JSON arrives on stdin. Its behaviour
#: comes from the task's metadata: ``work_ms``, ``fail_times``, ``poison``,
#: ``reject_below_attempt``. Attempts count every run of the task (draft and review alike).
SCRIPT = r"""
import json, sys, time
role = sys.argv[1]
doc = json.load(sys.stdin)
meta = doc["task"].get("metadata") or dict()
attempt = doc["attempt"]
time.sleep(meta.get("work_ms", 100) / 1000)
if role == "writer":
    if meta.get("poison") or attempt <= meta.get("fail_times", 0):
        print("simulated failure on attempt %d" % attempt, file=sys.stderr)
        sys.exit(1)
    print("drafted %r" % doc["task"]["title"])
    sys.exit(0)
if attempt < meta.get("reject_below_attempt", 0):
    print("needs another pass")
    sys.exit(3)
print("approved")
"""

FINAL_STAGES = ("done", "dead")


@dataclass(frozen=True)
class DemoOptions:
    """How big the demo is and where it keeps its files."""

    task_count: int = 30
    workers: int = 3
    concurrency: int = 4
    keep_dir: Path | None = None
    timeout_s: float = 90.0
    console: Console | None = None
    #: The summary as one JSON object on stdout; the progress lines go to stderr.
    as_json: bool = False


def demo_tasks(pipeline_id: str, count: int) -> list[TaskCreate]:
    """The demo's tasks: mostly plain, a few flaky, a few rejected once, one poison task."""
    tasks = []
    for i in range(count):
        meta: dict[str, Any] = {"work_ms": 60 + (i * 37) % 240}
        kind = "plain"
        if i == 1:
            meta["poison"], kind = True, "poison"
        elif i % 10 == 3:
            meta["fail_times"], kind = 1, "flaky"
        elif i % 10 == 7:
            meta["fail_times"], kind = 2, "flaky"
        elif i % 10 == 5:
            meta["reject_below_attempt"], kind = 3, "rejected once"
        meta["kind"] = kind
        tasks.append(
            TaskCreate(
                pipeline_id=pipeline_id,
                title=f"demo task {i + 1:02d} ({kind})",
                priority=5 if i % 6 == 0 else 0,
                metadata=meta,
                retry_policy=RetryPolicy(
                    max_attempts=3, retry_delay_ms=250, dead_letter_stage="dead"
                ),
            )
        )
    return tasks


def _toml_str(value: str) -> str:
    # A JSON string literal is a valid TOML basic string (same escapes).
    return json.dumps(value)


def _role(name: str, exit_codes: dict[str, str]) -> str:
    # argv items are templates: braces must be doubled to stay literal.
    script = SCRIPT.replace("{", "{{").replace("}", "}}")
    # -I -S: no site import, no user environment: the scripts need only the stdlib and start fast.
    argv = ", ".join(_toml_str(a) for a in (sys.executable, "-I", "-S", "-c", script, name))
    codes = ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in exit_codes.items())
    return (
        f'[[roles]]\nname = "{name}"\nexecutor = "command"\n'
        f"[roles.options]\nargv = [{argv}]\n"
        f'stdin = "task_json"\nstream_output = false\nexit_codes = {{ {codes} }}\n'
    )


def worker_config(db_url: str, concurrency: int) -> str:
    """The TOML configuration every demo worker process runs with."""
    return (
        f"[tracker]\nurl = {_toml_str(db_url)}\n\n"
        f"[worker]\nconcurrency = {concurrency}\nlease_ttl_s = 10\nidle_min_s = 0.01\n"
        "idle_max_s = 0.25\nshutdown_grace_s = 3\nmaintenance_interval_s = 1\n"
        "report_flush_s = 0.2\n\n"
        + _role("writer", {"0": "submit"})
        + "\n"
        + _role("reviewer", {"0": "approve", "3": "reject"})
    )


def _child_env() -> dict[str, str]:
    """This environment without BACKLOG_WORKER_* settings (the config file decides), plus the
    source tree on PYTHONPATH so a checkout that is not installed works too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _is_final(task: Task) -> bool:
    return task.stage in FINAL_STAGES or task.dead_letter_reason is not None


async def _tasks(tracker: Tracker, pipeline_id: str) -> list[Task]:
    items: list[Task] = []
    cursor: str | None = None
    while True:
        page = await tracker.list_tasks(pipeline_id=pipeline_id, limit=1000, cursor=cursor)
        items.extend(page.items)
        if page.next_cursor is None or not page.items:
            return items
        cursor = f"{page.items[-1].created_at_ms}:{page.items[-1].id}"


def _progress_view(tasks: list[Task], running: int, elapsed: float) -> RenderableType:
    stages = Counter(t.stage for t in tasks)
    finished = sum(1 for t in tasks if _is_final(t))
    head = Table.grid(padding=(0, 1))
    head.add_row(
        f"finished {finished}/{len(tasks)}",
        ProgressBar(total=max(1, len(tasks)), completed=finished, width=40),
        f"{elapsed:.1f}s",
    )
    table = Table(show_edge=False)
    for col in ("draft", "review", "done", "dead", "running", "retry pending"):
        table.add_column(col, justify="right")
    now_ms = int(time.time() * 1000)
    pending = sum(1 for t in tasks if not _is_final(t) and t.next_eligible_at_ms > now_ms)
    counts = [str(stages[s]) for s in ("draft", "review", "done", "dead")]
    table.add_row(*counts, str(running), str(pending))
    untouched = running == 0 and all(t.task_version == 1 and t.stage == "draft" for t in tasks)
    if untouched:  # nothing claimed yet: the worker processes are still importing
        return Group(head, table, Text("starting the worker processes...", style="dim"))
    return Group(head, table)


def _last_error(log: Path) -> str:
    """The most telling line of a worker's log: the last error line, else the last line."""
    lines = [ln.strip(" |+-\t") for ln in log.read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or ["(no output)"])[-1][:300]


class _Workers:
    """The worker processes of the demo: start, watch, stop (TERM, then KILL)."""

    def __init__(self, workdir: Path, config: Path, db_url: str, count: int) -> None:
        self.workdir, self.config, self.db_url, self.count = workdir, config, db_url, count
        self.procs: list[Process] = []
        self.logs: list[Path] = []
        self.stopping = False
        self.problem: str | None = None

    async def start(self, stack: ExitStack) -> None:
        env = _child_env()
        for i in range(1, self.count + 1):
            log = self.workdir / f"worker-{i}.log"
            fh = stack.enter_context(log.open("wb"))
            argv = [
                sys.executable, "-m", "worker", "run",
                "--config", str(self.config), "--tracker", self.db_url,
                "--agent-id", f"demo-worker-{i}", "--log-level", "WARNING", "--log-format", "plain",
            ]  # fmt: skip
            with anyio.CancelScope(shield=True):  # a started worker is always tracked (and stopped)
                proc = await anyio.open_process(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fh, env=env
                )
                self.procs.append(proc)
            self.logs.append(log)

    async def watch(self, index: int, proc: Process) -> None:
        """Record a worker that exits before the demo stops it (a crash or a config error)."""
        code = await proc.wait()
        if not self.stopping and self.problem is None:
            log = self.logs[index]
            self.problem = (
                f"worker {index + 1} exited with status {code}: {_last_error(log)} (log: {log})"
            )

    async def stop(self) -> None:
        """TERM every worker (they drain at once: nothing is left to claim), KILL stragglers."""
        if self.stopping:
            return
        self.stopping = True
        with anyio.CancelScope(shield=True):
            for proc in self.procs:
                if proc.returncode is None:
                    proc.terminate()
            with anyio.move_on_after(15):
                for proc in self.procs:
                    await proc.wait()
            for proc in self.procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            for proc in self.procs:
                await proc.aclose()


async def _monitor(
    tracker: Tracker, pipeline_id: str, workers: _Workers, opts: DemoOptions, console: Console
) -> tuple[list[Task], str | None, float]:
    """Refresh the progress view until every task is final, a worker dies, or time runs out."""
    from rich.live import Live

    started = time.monotonic()
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    last_line = 0.0
    with live if live is not None else nullcontext():
        while True:
            tasks = await _tasks(tracker, pipeline_id)
            stats = await tracker.queue_stats()
            running = sum(r.running_count or 0 for r in stats.roles)
            elapsed = time.monotonic() - started
            finished = all(_is_final(t) for t in tasks)
            problem = workers.problem
            if not finished and problem is None and elapsed > opts.timeout_s:
                problem = f"timed out after {opts.timeout_s:g}s"
            view = _progress_view(tasks, running, elapsed)
            if live is not None:
                live.update(view, refresh=True)
            elif finished or problem or elapsed - last_line >= 2:
                last_line = elapsed
                done = sum(1 for t in tasks if _is_final(t))
                console.print(f"finished {done}/{len(tasks)} after {elapsed:.1f}s", soft_wrap=True)
            if finished or problem:
                return tasks, problem, elapsed
            await anyio.sleep(0.2)


async def _run(opts: DemoOptions, workdir: Path, console: Console) -> bool:
    db_url = f"sqlite:///{workdir / 'rail.db'}"
    config = workdir / "worker.toml"
    config.write_text(worker_config(db_url, opts.concurrency), encoding="utf-8")
    tracker = await open_tracker(db_url)
    workers = _Workers(workdir, config, db_url, opts.workers)
    try:
        pipeline_id = await tracker.create_pipeline("demo-review", PIPELINE)
        console.print(
            f"rail {db_url}\npipeline draft -> review -> done, reject loop review -> draft, "
            f"dead letters to 'dead'\n{opts.task_count} tasks, {opts.workers} worker processes "
            f"x {opts.concurrency} slots, command executor",
            soft_wrap=True,
        )
        await tracker.create_tasks(demo_tasks(pipeline_id, opts.task_count))
        with ExitStack() as stack:
            async with anyio.create_task_group() as tg:
                await workers.start(stack)
                for i, proc in enumerate(workers.procs):
                    tg.start_soon(workers.watch, i, proc)
                tasks, problem, elapsed = await _monitor(
                    tracker, pipeline_id, workers, opts, console
                )
                await workers.stop()
        summary = await summarise(tracker, tasks, elapsed)
        if opts.as_json:
            kept = db_url if opts.keep_dir is not None else None
            doc = {"ok": problem is None, "problem": problem, "rail": kept, **summary.to_json()}
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            sys.stdout.flush()
        else:
            console.print(render_summary(summary))
        if problem:
            console.print(Text(f"demo incomplete: {problem}", style="red"), soft_wrap=True)
            return False
        if opts.keep_dir is not None:
            console.print(
                f"the rail is kept: backlog-worker task list --tracker {db_url}\n"
                f"                  backlog-worker queue --tracker {db_url}",
                soft_wrap=True,
            )
        else:
            console.print("(--keep DIR keeps the rail to explore it with the CLI)")
        return True
    finally:
        await workers.stop()
        with anyio.CancelScope(shield=True):
            await tracker.aclose()


def run_demo(opts: DemoOptions) -> bool:
    """Run the demo end to end; True when every task finished and the workers behaved."""
    console = opts.console or SafeConsole(stderr=opts.as_json)
    if opts.keep_dir is not None:
        if (opts.keep_dir / "rail.db").exists():
            raise OpsError(
                f"--keep {str(opts.keep_dir)!r} already holds a demo rail (rail.db); "
                "choose a new directory",
                EXIT_USAGE,
            )
        opts.keep_dir.mkdir(parents=True, exist_ok=True)
        return anyio.run(_run, opts, opts.keep_dir.resolve(), console)
    with tempfile.TemporaryDirectory(prefix="backlog-demo-") as tmp:
        return anyio.run(_run, opts, Path(tmp), console)
