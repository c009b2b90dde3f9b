"""Embedded tracker throughput: drain N tasks through claim -> 1 event -> transition, and in
a worker's batches.

``python -m bench.embedded [--tasks 10000] [--slots 8] [--processes 4] [--synchronous NORMAL]
[--batch 10] [--phases 1,2,3,4] [--ab OLD_TREE --rounds 5]``

Phase 1: one process, one tracker, one sequential loop (latency-bound: three commits per
cycle). Phase 2: one process, ``--slots`` concurrent loops on one tracker, as a worker daemon
with that many slots (their writes share commits). Phase 3: ``--processes`` processes, one
sequential loop each, on one file. Phase 4 (``--batch N``, 0 to skip): a worker's batches,
``claim_many`` of N and one ``finish_many`` of their plain transitions, the next claim sent a
pass after the reports (as a worker's claimer sends it; the rail claims ahead as it does for a
worker: the reports also claim the batch after next, and a claim is answered from those); it
prints the database thread's own CPU per task and the statements and commits per task
(counted in a second, traced run).
Phases 1-3 print cycles/s and p50/p99 per operation (milliseconds) and the CPU per cycle
(phase 3: of the child processes, start-up included);
``--synchronous FULL`` measures power-loss durability. A benchmark, not a test: it asserts
nothing about speed, only that every task was transitioned exactly once. ``--phases`` runs a
subset. Before/after of phase 4 in one run: ``--ab OLD_TREE --rounds 5`` runs it in a
process of the source tree ``OLD_TREE`` (A, e.g. a ``git worktree`` of the older commit) and
of this tree (B) in turn, alternating which goes first, and prints each round and both
sides' medians of the database thread's CPU per task.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import Lease, TaskCreate

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
OPS = ("claim", "event", "transition", "cycle")


async def _setup(path: str, tasks: int, synchronous: str) -> None:
    tracker = await EmbeddedTracker.open(path, synchronous=synchronous, max_backlog_depth=0)
    try:
        pid = await tracker.create_pipeline("bench", PIPELINE)
        for start in range(0, tasks, 1000):
            await tracker.create_tasks(
                [
                    TaskCreate(pipeline_id=pid, title=f"task {i}", metadata={"i": i})
                    for i in range(start, min(start + 1000, tasks))
                ]
            )
    finally:
        await tracker.aclose()


async def _drain(path: str, agent: str, synchronous: str, slots: int = 1) -> dict[str, list[float]]:
    """Drain with ``slots`` concurrent claim loops on one tracker (1 = strictly sequential)."""
    lat: dict[str, list[float]] = {op: [] for op in OPS}
    tracker = await EmbeddedTracker.open(path, synchronous=synchronous)
    try:
        async with anyio.create_task_group() as tg:
            for n in range(slots):
                tg.start_soon(_slot, tracker, f"{agent}-{n}", lat)
    finally:
        await tracker.aclose()
    return lat


async def _slot(tracker: EmbeddedTracker, agent: str, lat: dict[str, list[float]]) -> None:
    clock = time.perf_counter
    while True:
        t0 = clock()
        lease = await tracker.claim(agent, "coder", 60_000)
        t1 = clock()
        if lease is None:
            return
        await tracker.add_event(lease, "progress", {"step": 1})
        t2 = clock()
        await tracker.transition(
            lease,
            "complete",
            expected_stage=lease.task.stage,
            expected_task_version=lease.task.task_version,
        )
        t3 = clock()
        lat["claim"].append(t1 - t0)
        lat["event"].append(t2 - t1)
        lat["transition"].append(t3 - t2)
        lat["cycle"].append(t3 - t0)


async def _batches(path: str, n: int, trace: bool) -> dict[str, float]:
    """Drain with :func:`_batch_loop`: tasks, the database thread's CPU seconds, statements and
    commits (counted when ``trace``: the callback costs CPU, so not in a timed run)."""
    tracker = await EmbeddedTracker.open(path)
    statements = commits = 0

    def count(sql: str) -> None:
        nonlocal statements, commits
        statements += 1
        commits += sql == "COMMIT"

    db = tracker.engine.db
    clock = time.pthread_getcpuclockid(db.thread_id)
    try:
        if trace:
            await db.run(lambda: db.conn.set_trace_callback(count))
        cpu0 = time.clock_gettime(clock)
        done = await _batch_loop(tracker, n)
        cpu = time.clock_gettime(clock) - cpu0
        if trace:
            await db.run(lambda: db.conn.set_trace_callback(None))
    finally:
        await tracker.aclose()
    return {"tasks": done, "db_cpu": cpu, "statements": statements, "commits": commits}


async def _batch_loop(tracker: EmbeddedTracker, n: int) -> int:
    """Claim ``n``, report them in one ``finish_many`` and send the next claim a pass later,
    until no work is left; how many tasks were finished."""
    done = 0
    leases = await tracker.claim_many("bench", "coder", 60_000, n)
    while leases:
        nxt: list[Lease] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_report_all, tracker, leases)
            tg.start_soon(_claim_next, tracker, n, nxt)
        done += len(leases)
        leases = nxt
    return done


async def _report_all(tracker: EmbeddedTracker, leases: list[Lease]) -> None:
    """One ``finish_many`` of the leases' plain transitions, as a worker reports no-op runs."""
    items = [
        FinishItem(
            lease=x,
            transition={
                "trigger": "complete",
                "expected_stage": x.task.stage,
                "expected_task_version": x.task.task_version,
                "instructions": None,
                "usage": None,
            },
        )
        for x in leases
    ]
    outcomes = await tracker.finish_many(items)
    assert all(isinstance(o, FinishResult) for o in outcomes), outcomes


async def _claim_next(tracker: EmbeddedTracker, n: int, into: list[Lease]) -> None:
    """The next ``claim_many``, a scheduling pass after the reports went."""
    await anyio.lowlevel.checkpoint()
    into.extend(await tracker.claim_many("bench", "coder", 60_000, n))


def _child(path: str, agent: str, synchronous: str, ready: Any, go: Any, out: Any) -> None:
    ready.set()
    go.wait()
    out.put(anyio.run(_drain, path, agent, synchronous))


async def _count_done(path: str) -> int:
    tracker = await EmbeddedTracker.open(path)
    try:
        health = await tracker.health()
    finally:
        await tracker.aclose()
    return sum(s.count for s in health.tasks_by_stage if s.stage == "done")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _report(title: str, n: int, wall: float, lat: dict[str, list[float]]) -> None:
    print(f"\n{title}: {n} cycles in {wall:.2f} s -> {n / wall:,.0f} cycles/s")
    print(f"  {'op':<11} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for op in OPS:
        values = lat[op]
        mean = statistics.fmean(values) * 1000 if values else float("nan")
        print(f"  {op:<11} {_pct(values, 0.5):>8.3f} {_pct(values, 0.99):>8.3f} {mean:>8.3f}")


def _report_batches(tmp: Path, tasks: int, n: int, synchronous: str) -> None:
    """Phase 4: a timed drain in batches of ``n``, then a traced one for the counts."""
    timed, traced = str(tmp / "batch.db"), str(tmp / "batch-traced.db")
    anyio.run(_setup, timed, tasks, synchronous)
    anyio.run(_setup, traced, tasks, synchronous)
    t0, c0 = time.perf_counter(), time.process_time()
    res = anyio.run(_batches, timed, n, False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert anyio.run(_count_done, timed) == tasks == res["tasks"], res
    counted = anyio.run(_batches, traced, n, True)
    print(
        f"\n1 process, claim_many {n} + finish_many: {tasks} tasks in {wall:.2f} s -> "
        f"{tasks / wall:,.0f} tasks/s"
    )
    print(
        f"  CPU per task: {cpu / tasks * 1e6:.0f} us (all threads), database thread "
        f"{res['db_cpu'] / tasks * 1e6:.0f} us; statements per task "
        f"{counted['statements'] / tasks:.2f}, commits per task {counted['commits'] / tasks:.3f}"
    )


def _batch_round(tree: Path, tasks: int, n: int, synchronous: str) -> dict[str, float]:
    """Phase 4's timed drain in a fresh process of the source tree ``tree`` (its rail, its
    rules): tasks/s and the database thread's CPU per task."""
    code = (
        "import json, sys, tempfile, time, anyio\n"
        "from pathlib import Path\n"
        "from bench.embedded import _batches, _setup\n"
        "tasks, n, sync = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
        "with tempfile.TemporaryDirectory() as tmp:\n"
        "    path = str(Path(tmp) / 'batch.db')\n"
        "    anyio.run(_setup, path, tasks, sync)\n"
        "    t0 = time.perf_counter()\n"
        "    res = anyio.run(_batches, path, n, False)\n"
        "    wall = time.perf_counter() - t0\n"
        "print(json.dumps({'tasks_per_s': res['tasks'] / wall,"
        " 'db_us': res['db_cpu'] / res['tasks'] * 1e6}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed rail: no compiling per round
    done = subprocess.run(
        [sys.executable, "-c", code, str(tasks), str(n), synchronous],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _ab_batches(old: Path, rounds: int, tasks: int, n: int, synchronous: str) -> None:
    """Phase 4 of ``old`` (A) and of this tree (B) in turn, ``rounds`` each, alternating which
    goes first; each round and the medians."""
    here = Path(__file__).resolve().parents[1]
    sides: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for r in range(rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        for side in order:
            res = _batch_round(old if side == "A" else here, tasks, n, synchronous)
            sides[side].append(res)
            print(
                f"round {r + 1} {side}: {res['tasks_per_s']:,.0f} tasks/s, database thread "
                f"{res['db_us']:.1f} us/task"
            )
    med = {
        side: {k: statistics.median(x[k] for x in got) for k in ("tasks_per_s", "db_us")}
        for side, got in sides.items()
    }
    print(f"A: {old}\nB: {here}\nmedians of {rounds} round(s), claim_many {n} + finish_many")
    print(
        f"  tasks/s A {med['A']['tasks_per_s']:,.0f}  B {med['B']['tasks_per_s']:,.0f}  B/A "
        f"{med['B']['tasks_per_s'] / med['A']['tasks_per_s']:.2f}; database thread us/task A "
        f"{med['A']['db_us']:.1f}  B {med['B']['db_us']:.1f}  A/B "
        f"{med['A']['db_us'] / med['B']['db_us']:.2f}"
    )


def _calibrate() -> float:
    """CPU seconds for 10 million Python additions: compare machines (and load) with it."""
    c0 = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - c0


def main() -> None:
    """Run the phases (or the before/after of phase 4) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--synchronous", default="NORMAL")
    parser.add_argument("--slots", type=int, default=8, help="concurrent loops in phase 2")
    parser.add_argument("--batch", type=int, default=10, help="claim_many size in phase 4")
    parser.add_argument("--phases", default="1,2,3,4", help="comma-separated subset of 1,2,3,4")
    parser.add_argument(
        "--ab",
        type=Path,
        default=None,
        metavar="ROOT",
        help="phase 4 of the source tree ROOT (A) and of this tree (B) in turn",
    )
    parser.add_argument("--rounds", type=int, default=5, help="phase 4 drains per side, --ab")
    args = parser.parse_args()
    try:
        phases = {int(p) for p in args.phases.split(",") if p.strip()}
    except ValueError:
        parser.error(f"--phases must be comma-separated phase numbers, not {args.phases!r}")
    if not phases or not phases <= {1, 2, 3, 4}:
        parser.error(f"--phases: choose among 1,2,3,4, not {args.phases!r}")
    if args.ab is not None and not (args.ab / "bench" / "embedded.py").is_file():
        parser.error(f"--ab {args.ab}: not a source tree of this project (no bench/embedded.py)")
    if args.ab is not None and (args.batch < 1 or args.rounds < 1):
        parser.error("--ab: --batch and --rounds must be at least 1")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"embedded tracker bench: {args.tasks} tasks, synchronous={args.synchronous}, "
        f"{os.cpu_count()} CPUs, load average {load}, calibration {_calibrate():.2f} CPU-s "
        "per 10M Python additions"
    )
    if args.ab is not None:
        _ab_batches(args.ab, args.rounds, args.tasks, args.batch, args.synchronous)
        return
    with tempfile.TemporaryDirectory(prefix="bench-embedded-") as tmp:
        _phases(Path(tmp), args, phases)
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _phases(tmp: Path, args: argparse.Namespace, phases: set[int]) -> None:
    """Run the chosen ``phases`` in ``tmp`` and print their figures."""
    if 1 in phases:
        one = str(tmp / "one.db")
        anyio.run(_setup, one, args.tasks, args.synchronous)
        t0, c0 = time.perf_counter(), time.process_time()
        lat = anyio.run(_drain, one, "bench-1", args.synchronous)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        done = anyio.run(_count_done, one)
        assert done == args.tasks == len(lat["cycle"]), (done, len(lat["cycle"]))
        _report("1 process", len(lat["cycle"]), wall, lat)
        print(f"  CPU per cycle (all threads of the process): {cpu / args.tasks * 1e6:.0f} us")
    if 2 in phases and args.slots > 1:
        slotted = str(tmp / "slots.db")
        anyio.run(_setup, slotted, args.tasks, args.synchronous)
        t0, c0 = time.perf_counter(), time.process_time()
        lat = anyio.run(_drain, slotted, "bench-s", args.synchronous, args.slots)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert anyio.run(_count_done, slotted) == args.tasks == len(lat["cycle"])
        _report(f"1 process, {args.slots} concurrent slots", args.tasks, wall, lat)
        print(f"  CPU per cycle (all threads of the process): {cpu / args.tasks * 1e6:.0f} us")
    if 3 in phases:
        _processes(tmp, args)
    if 4 in phases and args.batch > 0:
        _report_batches(tmp, args.tasks, args.batch, args.synchronous)


def _processes(tmp: Path, args: argparse.Namespace) -> None:
    """Phase 3: ``args.processes`` processes, one sequential loop each, on one file."""
    many = str(tmp / "many.db")
    anyio.run(_setup, many, args.tasks, args.synchronous)
    ctx = mp.get_context("spawn")
    ready = [ctx.Event() for _ in range(args.processes)]
    go = ctx.Event()
    out: Any = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(many, f"bench-{n}", args.synchronous, ready[n], go, out))
        for n in range(args.processes)
    ]
    for p in procs:
        p.start()
    for r in ready:
        r.wait()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = before.ru_utime + before.ru_stime
    t0 = time.perf_counter()
    go.set()
    results = [out.get() for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    # The children's CPU, start-up and waiting for the go included (they are reaped now).
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = children.ru_utime + children.ru_stime - cpu0
    merged: dict[str, list[float]] = {op: [] for op in OPS}
    for res in results:
        for op in OPS:
            merged[op].extend(res[op])
    done = anyio.run(_count_done, many)
    assert done == args.tasks == len(merged["cycle"]), (done, len(merged["cycle"]))
    per = ", ".join(str(len(r["cycle"])) for r in results)
    _report(f"{args.processes} processes (per process: {per})", done, wall, merged)
    print(f"  CPU per cycle (the processes, start-up included): {cpu / done * 1e6:.0f} us")


if __name__ == "__main__":
    main()
