"""Embedded tracker throughput: drain N tasks through claim -> 1 event -> transition, and in
a worker's batches.

``python -m bench.embedded [--tasks 10000] [--slots 8] [--processes 4] [--synchronous NORMAL]
[--batch 10]``

Phase 1: one process, one tracker, one sequential loop (latency-bound: three commits per
cycle). Phase 2: one process, ``--slots`` concurrent loops on one tracker, as a worker daemon
with that many slots (their writes share commits). Phase 3: ``--processes`` processes, one
sequential loop each, on one file. Phase 4 (``--batch N``, 0 to skip): a worker's batches,
``claim_many`` of N and one ``finish_many`` of their plain transitions, the next claim sent a
pass after the reports (as a worker's claimer sends it); it prints the database thread's own
CPU per task and the statements and commits per task (counted in a second, traced run).
Phases 1-3 print cycles/s and p50/p99 per operation (milliseconds) and the CPU per cycle
(phase 3: of the child processes, start-up included);
``--synchronous FULL`` measures power-loss durability. A benchmark, not a test: it asserts
nothing about speed, only that every task was transitioned exactly once. Before/after: run it
in a ``git worktree`` of the older commit and here, in turn.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
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


def _calibrate() -> float:
    """CPU seconds for 10 million Python additions: compare machines (and load) with it."""
    c0 = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - c0


def main() -> None:
    """Run both phases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--synchronous", default="NORMAL")
    parser.add_argument("--slots", type=int, default=8, help="concurrent loops in phase 2")
    parser.add_argument("--batch", type=int, default=10, help="claim_many size in phase 4")
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"embedded tracker bench: {args.tasks} tasks, synchronous={args.synchronous}, "
        f"{os.cpu_count()} CPUs, load average {load}, calibration {_calibrate():.2f} CPU-s "
        "per 10M Python additions"
    )
    with tempfile.TemporaryDirectory(prefix="bench-embedded-") as tmp:
        one = str(Path(tmp) / "one.db")
        anyio.run(_setup, one, args.tasks, args.synchronous)
        t0, c0 = time.perf_counter(), time.process_time()
        lat = anyio.run(_drain, one, "bench-1", args.synchronous)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        done = anyio.run(_count_done, one)
        assert done == args.tasks == len(lat["cycle"]), (done, len(lat["cycle"]))
        _report("1 process", len(lat["cycle"]), wall, lat)
        print(f"  CPU per cycle (all threads of the process): {cpu / args.tasks * 1e6:.0f} us")

        if args.slots > 1:
            slotted = str(Path(tmp) / "slots.db")
            anyio.run(_setup, slotted, args.tasks, args.synchronous)
            t0, c0 = time.perf_counter(), time.process_time()
            lat = anyio.run(_drain, slotted, "bench-s", args.synchronous, args.slots)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert anyio.run(_count_done, slotted) == args.tasks == len(lat["cycle"])
            _report(f"1 process, {args.slots} concurrent slots", args.tasks, wall, lat)
            print(f"  CPU per cycle (all threads of the process): {cpu / args.tasks * 1e6:.0f} us")

        many = str(Path(tmp) / "many.db")
        anyio.run(_setup, many, args.tasks, args.synchronous)
        ctx = mp.get_context("spawn")
        ready = [ctx.Event() for _ in range(args.processes)]
        go = ctx.Event()
        out: Any = ctx.Queue()
        procs = [
            ctx.Process(
                target=_child, args=(many, f"bench-{n}", args.synchronous, ready[n], go, out)
            )
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

        if args.batch > 0:
            _report_batches(Path(tmp), args.tasks, args.batch, args.synchronous)
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
