"""Embedded tracker throughput: drain N tasks through claim -> 1 event -> transition.

``python -m bench.embedded [--tasks 10000] [--slots 8] [--processes 4] [--synchronous NORMAL]``

Phase 1: one process, one tracker, one sequential loop (latency-bound: three commits per
cycle). Phase 2: one process, ``--slots`` concurrent loops on one tracker, as a worker daemon
with that many slots (their writes share commits). Phase 3: ``--processes`` processes, one
sequential loop each, on one file. Each phase prints cycles/s and p50/p99 per operation
(milliseconds) and the CPU per cycle (phase 3: of the child processes, start-up included);
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

from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate

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
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
