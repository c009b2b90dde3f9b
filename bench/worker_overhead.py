"""The worker's own cost per task, with the tracker taken out of the picture.

    python -m bench.worker_overhead [--tasks 5000] [--concurrency 10] [--rail plain|batched]
                                    [--log-level WARNING] [--event-loop auto|asyncio|uvloop]
                                    [--rounds 1] [--ab ROOT] [--callgrind]

A stub tracker answers every claim with leases of their own ids (built before the clock
starts) and every transition at once, so what is left is the worker: slots, claim loop, the tasks
claims and runs go to, the lease keeper, reporting, retry wrappers. ``--rail plain`` (the
default) is a plain NullTickets server's shape (one lease per ``claim``, one ``transition`` per
report, idempotency keys); ``--rail batched`` the embedded rail's (``claim_many`` for every free
slot, reports batched into ``finish_many``, no keys), with no database behind it: the event
loop's own CPU per task, start-up excluded, in one process and one thread (so steadier than
``python -m bench.worker`` on a busy machine). Compare with ``python -m bench.worker`` (real
embedded tracker) to see which side bounds throughput. ``--log-level INFO`` logs as a worker at
its default level does (two lines per run through the secret-scrubbing filter and the plain
formatter, into ``/dev/null``): what those lines cost the event loop. ``--event-loop``: the loop
the stub runs on; ``auto`` (the default) is uvloop where it is installed, as ``backlog-worker
run`` chooses by default (``[worker] event_loop``), so the figure is the one a worker pays (a
no-op task costs the worker ~15 % less on uvloop than on asyncio). ``--ab ROOT`` runs this
stub over the worker of the source tree ROOT and of this tree in turn, ``--rounds`` times each,
and prints both sides' medians. ``--callgrind`` counts instructions instead of timing: the
stub's drain of ``--tasks`` and of three times as many under ``valgrind --tool=callgrind``,
each counted from the worker's start to its end only (the process's start-up and the leases
built ahead are left out: :func:`zlib.crc32` marks the two moments, at which callgrind dumps
its counters), and the difference per task: the worker's own instructions per no-op task in
steady state, whatever the machine's load (two runs of one tree agree within about 1 %; with
``--ab`` both trees, each once). A benchmark double only: tests always use the real embedded
tracker.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from plugins.api import ExecutionContext, Outcome, Transition
from tracker_client.capabilities import Capabilities
from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.errors import Unsupported
from tracker_client.models import Health, Lease, Pipeline, Run, Task, TransitionResult
from worker.cli.gc_tuning import BusyGc
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

_TASK = Task(
    id="t",
    pipeline_id="p",
    stage="todo",
    title="x",
    description="",
    priority=0,
    task_version=1,
    next_eligible_at_ms=0,
    retry_delay_ms=0,
    created_at_ms=0,
    updated_at_ms=0,
)
_RUN = Run(
    id="r", task_id="t", attempt=1, status="running", agent_id="a", agent_role="b", started_at_ms=0
)
_LEASE = Lease(task=_TASK, run=_RUN, lease_id="l", lease_token="0" * 64, expires_at_ms=0)
_PIPELINE = Pipeline(
    id="p",
    name="p",
    definition={"transitions": [{"from": "todo", "to": "done", "trigger": "complete"}]},
    created_at_ms=0,
)


def _leases(n: int) -> list[Lease]:
    """``n`` leases of their own ids (a run's log lines and keys differ from run to run, as on
    a rail), built before the clock starts."""
    return [
        _LEASE.model_copy(
            update={
                "task": _TASK.model_copy(update={"id": f"t{i:08d}"}),
                "run": _RUN.model_copy(update={"id": f"r{i:08d}", "task_id": f"t{i:08d}"}),
                "lease_id": f"l{i:08d}",
            }
        )
        for i in range(n)
    ]


class _StubTracker:
    def __init__(self, tasks: int) -> None:
        self.left = tasks
        self._leases = _leases(tasks)

    async def health(self) -> Health:
        return Health(status="ok", version="stub")

    async def ping(self) -> None:
        return None

    async def capabilities(self) -> Capabilities:
        return Capabilities(max_lease_ttl_ms=None)  # keys sent, as across a network

    async def claim(self, *args: Any, **kwargs: Any) -> Lease | None:
        await anyio.lowlevel.checkpoint()
        if self.left <= 0:
            return None
        self.left -= 1
        return self._leases[self.left]

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        return _PIPELINE  # read once per worker and role: the trigger is chosen per stage

    async def transition(self, *args: Any, **kwargs: Any) -> TransitionResult:
        await anyio.lowlevel.checkpoint()
        return TransitionResult(previous_stage="todo", new_stage="done", trigger="complete")

    async def wait_for_work(self, timeout_s: float, *, since: str | None = None) -> str:
        await anyio.sleep(timeout_s)
        return ""

    async def maintenance(self) -> None:
        raise Unsupported("stub")

    async def queue_stats(self) -> None:
        raise Unsupported("stub")  # a draining worker then relies on its own retry times


class _BatchedStub(_StubTracker):
    """The embedded rail's shape: ``claim_many`` and ``finish_many`` declared, no keys."""

    async def capabilities(self) -> Capabilities:
        return Capabilities(
            max_lease_ttl_ms=None,
            answers_can_be_lost=False,
            extensions=frozenset({"claim_many", "finish_many"}),
        )

    async def claim_many(self, *args: Any, **kwargs: Any) -> list[Lease]:
        n: int = args[3] if len(args) > 3 else kwargs["n"]
        await anyio.lowlevel.checkpoint()
        got = max(0, min(n, self.left))
        self.left -= got
        return self._leases[self.left : self.left + got]

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishResult]:
        await anyio.lowlevel.checkpoint()
        return [FinishResult(event_ids=[], transition=_MOVED) for _ in items]


_MOVED = TransitionResult(previous_stage="todo", new_stage="done", trigger="complete")


class _Noop:
    async def execute(self, ctx: ExecutionContext) -> Outcome:
        return Transition()


def _log_to_null(level: str) -> None:
    """Log as a ``backlog-worker run`` process of the tree under test does (its handler,
    filters and plain format; no call sites where that tree omits them) into /dev/null."""
    from worker import logs

    logs.configure_logging(level, "plain", stream=open(os.devnull, "w"), worker=True)  # noqa: SIM115
    omit = getattr(logs, "omit_call_sites", None)  # (an older tree, run by --ab, may lack it)
    if omit is not None:
        omit()


def _uvloop(event_loop: str) -> bool:
    """Whether the stub runs on uvloop: ``auto`` where it is installed, as the worker does."""
    if event_loop == "asyncio":
        return False
    installed = importlib.util.find_spec("uvloop") is not None
    if event_loop == "uvloop" and not installed:
        raise SystemExit("--event-loop uvloop: uvloop is not installed")
    return installed


async def _main(tasks: int, concurrency: int, rail: str, loop: str = "asyncio") -> None:
    stub = _BatchedStub(tasks) if rail == "batched" else _StubTracker(tasks)
    # The collector as `backlog-worker run` tunes it: what exists now (the leases built ahead
    # too, which a rail would build as it claims them) is frozen, the youngest generation raised.
    BusyGc(enabled=True).apply()
    worker = Worker(
        stub,  # type: ignore[arg-type]
        WorkerConfig(agent_id="bench", concurrency=concurrency, drain=True, idle_min_s=0.01),
        [Role(RoleConfig(name="b", executor="noop"), _Noop())],
    )
    wall, cpu = time.perf_counter(), time.process_time()
    zlib.crc32(b"")  # the mark --callgrind counts from (callgrind dumps its counters here)...
    await worker.run()
    zlib.crc32(b"")  # ... and to
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"worker alone ({rail} rail, log level {logging.getLevelName(_level())}, {loop}), "
        f"{tasks} no-op tasks, concurrency {concurrency}: "
        f"{tasks / wall:.0f} tasks/s, {cpu / tasks * 1e6:.1f} us CPU per task",
        flush=True,
    )


def _level() -> int:
    return logging.getLogger("backlog_worker").getEffectiveLevel()


_FIGURES = re.compile(r"(\d+) tasks/s, ([\d.]+) us CPU per task")


def _ab(old: Path, args: argparse.Namespace) -> None:
    """This benchmark in a ``python`` of the source tree ``old`` (A) and of this one (B)."""
    runs: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    for rnd in range(args.rounds):
        for side in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
            tree = str(old if side == "A" else ROOT)
            # This file's stub and loop, over the worker of ``tree`` (first on the path).
            code = f"import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path({__file__!r}, "
            code += "run_name='__main__')"
            done = subprocess.run(
                [sys.executable, "-c", code, "overhead", *_own_args(args)],
                env={**os.environ, "PYTHONPATH": tree},
                cwd=tree,
                capture_output=True,
                text=True,
                check=True,
            )
            found = _FIGURES.search(done.stdout)
            if found is None:
                raise SystemExit(f"no figures in {tree}'s output: {done.stdout!r}")
            runs[side].append((float(found[1]), float(found[2])))
            print(f"round {rnd + 1} {side}: {done.stdout.strip()}", flush=True)
    (ta, ca), (tb, cb) = (
        (statistics.median(r[0] for r in runs[s]), statistics.median(r[1] for r in runs[s]))
        for s in ("A", "B")
    )
    print(f"A: {old}\nB: {ROOT}\nmedians of {args.rounds} round(s), {args.tasks} tasks each")
    print(f"tasks/s A {ta:.0f} B {tb:.0f} (B/A {tb / ta:.2f})")
    print(f"us CPU per task A {ca:.1f} B {cb:.1f} (A/B {ca / cb:.2f})")


def _instructions(tree: Path, tasks: int, args: argparse.Namespace, work: Path) -> int:
    """Instructions from the worker's start to its end, a drain of ``tasks`` by the worker of
    ``tree`` under callgrind (the second of the three parts its two marks cut the run into)."""
    from bench import callgrind  # the parent's, whichever tree the child runs

    out = work / f"cg-{tasks}"
    code = f"import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path({__file__!r}, "
    code += "run_name='__main__')"
    own = [*_own_args(args)]
    own[own.index("--tasks") + 1] = str(tasks)
    done = subprocess.run(
        [
            *callgrind.command(out),
            *(sys.executable, "-c", code, "overhead", *own),
        ],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"callgrind run failed ({done.returncode}): {done.stderr[-2000:]}")
    return callgrind.totals(Path(f"{out}.2"))


def _callgrind(trees: Sequence[tuple[str, Path]], args: argparse.Namespace) -> None:
    """Each tree's instructions per no-op task: a drain of three times ``--tasks`` less one of
    ``--tasks``, per task of the difference (start-up and exit cancel out)."""
    small, large = args.tasks, 3 * args.tasks
    with tempfile.TemporaryDirectory(prefix="bench-cg-") as tmp:
        for label, tree in trees:
            counts = [_instructions(tree, n, args, Path(tmp)) for n in (small, large)]
            per_task = (counts[1] - counts[0]) / (large - small)
            print(
                f"{label} {tree}: {per_task / 1000:.1f}k instructions per task "
                f"({args.rail} rail, {args.event_loop} loop; {small} tasks {counts[0]:,}, "
                f"{large} tasks {counts[1]:,})",
                flush=True,
            )


def _own_args(args: argparse.Namespace) -> list[str]:
    return [
        *("--tasks", str(args.tasks), "--concurrency", str(args.concurrency)),
        *("--rail", args.rail, "--log-level", args.log_level, "--event-loop", args.event_loop),
    ]


#: This source tree.
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    """Parse arguments, run, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rail", choices=("plain", "batched"), default="plain")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="the worker's log level (INFO: its default, two lines per run), into /dev/null",
    )
    parser.add_argument(
        "--event-loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the stub's event loop (auto: uvloop where installed, as the worker chooses)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs per side with --ab")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instructions per task under callgrind (--tasks and 3x --tasks, subtracted)",
    )
    parser.add_argument(
        "--ab",
        type=Path,
        default=None,
        metavar="ROOT",
        help="before/after in one run: the source tree ROOT (A) and this tree (B) in turn",
    )
    args = parser.parse_args()
    if args.ab is not None and not (args.ab / "worker" / "__main__.py").is_file():
        parser.error(f"--ab {args.ab}: not a source tree of this project (no worker/)")
    if args.callgrind:
        _callgrind([("A", args.ab), ("B", ROOT)] if args.ab is not None else [("tree", ROOT)], args)
        return
    if args.ab is not None:
        _ab(args.ab, args)
        return
    _log_to_null(args.log_level)
    uvloop = _uvloop(args.event_loop)
    loop = "uvloop" if uvloop else "asyncio"
    anyio.run(
        _main,
        args.tasks,
        args.concurrency,
        args.rail,
        loop,
        backend_options={"use_uvloop": uvloop},
    )


if __name__ == "__main__":
    main()
