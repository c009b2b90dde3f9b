"""What a second worker process adds: each process's CPU split into start-up, drain and tail.

    python -m bench.steady [--tasks 5000] [--procs 1,2] [--rounds 3] [--ab OLD_TREE] [--syscalls]

``bench.peers`` and ``bench.worker`` give a worker's CPU per task over its whole life, so with
two processes each one's start-up weighs twice as much per task as with one. This bench drains
``--tasks`` no-op tasks with 1 and with 2 worker processes (real ``python -m worker run``, the
embedded rail on a fresh SQLite file) and splits each process's CPU (every thread's, from
``/proc/<pid>/task/*/schedstat``, sampled every 5 ms) at two moments read off the tracker's own
records of that process's runs (its agent id ends with its pid):

* **start-up**: from ``exec`` to the start of its first run;
* **drain**: from there to the end of its last run (the steady state, both processes running);
* **tail**: from there to its exit (the drain check, closing the rail, the interpreter's exit).

Each part is printed per task of the whole drain (the parts add up to the worker CPU per task
``bench.peers`` prints), with the drain part's event-loop and other-thread (database thread,
checkpointer) shares and its kernel share (``stime``, in clock ticks: coarse over a short
drain, read its medians). The drain part is what a second process adds beyond start-up: the
difference between its 1- and 2-process figures.

``--syscalls`` wraps each worker in ``perf stat`` (tracepoints: needs ``perf`` and the right to
trace) and prints the system calls and context switches per task, whole processes: counts a
loaded machine does not move. ``--ab OLD_TREE`` drains with that tree's worker (seeded by that
tree too) and this tree's in turn, alternating which goes first. A benchmark, not a test: it
asserts nothing about speed, only that every task was finished once.
"""

from __future__ import annotations

import argparse
import bisect
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.worker import ROOT, _config, _seed_with, worker_env

#: Sampling period of the workers' CPU clocks.
SAMPLE_S = 0.005
#: The system calls ``--syscalls`` counts one by one (the rest only in the total).
SYSCALLS = (
    "pread64",
    "pwrite64",
    "fcntl",
    "futex",
    "clock_nanosleep",
    "sendto",
    "getpid",
    "epoll_pwait",
    "fdatasync",
)


@dataclass
class Drain:
    """One drain's figures, per task of the whole drain (microseconds, or counts)."""

    startup: float = 0.0
    drain: float = 0.0
    drain_loop: float = 0.0
    drain_sys: float = 0.0
    tail: float = 0.0
    total: float = 0.0
    tasks_per_s: float = 0.0
    counts: dict[str, float] = field(default_factory=dict)


def _cpu(pid: int) -> tuple[float, float]:
    """(CPU seconds of ``pid``'s main thread, of its other threads), from ``schedstat``."""
    main = other = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended between the listing and the read
        if int(tid) == pid:
            main += ns / 1e9
        else:
            other += ns / 1e9
    return main, other


def _kernel(pid: int) -> float:
    """CPU seconds ``pid`` spent in the kernel (``stime``: clock ticks, ended threads too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / TICKS


TICKS = os.sysconf("SC_CLK_TCK")


class Sampler:
    """Samples each worker's CPU clocks until it exits: (time ms, main, others, kernel) per
    pid."""

    def __init__(self, pids: list[int]) -> None:
        self.samples: dict[int, list[tuple[float, float, float, float]]] = {p: [] for p in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid, rows in self.samples.items():
                try:
                    main, other = _cpu(pid)
                    kernel = _kernel(pid)
                except OSError:
                    continue  # exited
                rows.append((time.time() * 1000, main, other, kernel))
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def at(self, pid: int, ms: float) -> tuple[float, float, float]:
        """``pid``'s (main, others, kernel) CPU seconds at the first sample from ``ms`` on."""
        rows = self.samples[pid]
        i = min(bisect.bisect_left([row[0] for row in rows], ms), len(rows) - 1)
        return rows[i][1], rows[i][2], rows[i][3]


def _child_pid(pid: int) -> int:
    """The process ``pid`` (a ``perf stat`` wrapper) started."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    while True:
        found = path.read_text().split()
        if found:
            return int(found[0])
        time.sleep(0.001)


def _perf_counts(path: Path) -> dict[str, float]:
    """The event counts of a ``perf stat -x ,`` output file."""
    counts: dict[str, float] = {}
    for line in path.read_text().splitlines():
        parts = line.split(",")
        try:
            value = float(parts[0])
        except ValueError:
            continue  # a comment, or an event not counted
        if len(parts) > 2:
            name = parts[2].removeprefix("syscalls:sys_enter_").removeprefix("raw_syscalls:")
            counts[name] = counts.get(name, 0) + value
    return counts


def drain(tree: Path, tasks: int, procs: int, syscalls: bool = False) -> Drain:
    """``procs`` workers of ``tree`` drain ``tasks`` no-op tasks on a fresh file: the split."""
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        _seed_with(tree, db, tasks)
        config = _config(tmp, db, 10, drain=True)
        argv = [sys.executable, "-m", "worker", "run", "--config", str(config)]
        events = ",".join(
            ["task-clock", "raw_syscalls:sys_enter", "context-switches"]
            + [f"syscalls:sys_enter_{s}" for s in SYSCALLS]
        )
        workers: list[subprocess.Popen[bytes]] = []
        for i in range(procs):
            prefix = ["perf", "stat", "-x", ",", "-o", str(tmp / f"perf{i}"), "-e", events, "--"]
            workers.append(
                subprocess.Popen(
                    [*(prefix if syscalls else []), *argv],
                    env=worker_env(str(tree)),
                    cwd=tree,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        pids = [_child_pid(w.pid) if syscalls else w.pid for w in workers]
        sampler = Sampler(pids)
        totals: dict[int, float] = {}
        if syscalls:
            for pid, w in zip(pids, workers, strict=True):
                w.wait()
                # the worker's CPU, its ended threads' too (their /proc entries are gone)
                totals[pid] = _perf_counts(tmp / f"perf{len(totals)}")["task-clock"] / 1000
        else:
            for w in workers:
                _, status, usage = os.wait4(w.pid, 0)
                w.returncode = os.waitstatus_to_exitcode(status)
                totals[w.pid] = usage.ru_utime + usage.ru_stime
        sampler.stop()
        failed = [w.returncode for w in workers if w.returncode != 0]
        if failed:
            raise SystemExit(f"a worker exited with {failed[0]}")
        with sqlite3.connect(db) as conn:
            rows = conn.execute(
                "SELECT agent_id, min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
                "WHERE status = 'completed' GROUP BY agent_id"
            ).fetchall()
        done = sum(r[3] for r in rows)
        if done != tasks:
            raise SystemExit(f"{done} of {tasks} tasks finished")
        out = Drain()
        first = min(r[1] for r in rows)
        last = max(r[2] for r in rows)
        out.tasks_per_s = done / max((last - first) / 1000, 1e-9)
        for agent, started, ended, _ in rows:
            pid = int(agent.rsplit("-", 1)[1])
            m0, o0, k0 = sampler.at(pid, started)
            m1, o1, k1 = sampler.at(pid, ended)
            end = totals[pid]
            out.startup += m0 + o0
            out.drain += m1 + o1 - m0 - o0
            out.drain_loop += m1 - m0
            out.drain_sys += k1 - k0
            out.tail += end - m1 - o1
            out.total += end
        for name in ("startup", "drain", "drain_loop", "drain_sys", "tail", "total"):
            setattr(out, name, getattr(out, name) / done * 1e6)
        if syscalls:
            for i in range(procs):
                for name, n in _perf_counts(tmp / f"perf{i}").items():
                    if name == "task-clock":
                        continue
                    out.counts[name] = out.counts.get(name, 0.0) + n / done
        return out


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.0f}-{max(values):.0f}]"


def main() -> None:
    """Run the drains and print each round and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--procs", default="1,2", help="worker processes per drain")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ab", type=Path, default=None, help="an older source tree")
    parser.add_argument("--syscalls", action="store_true", help="count system calls (perf)")
    args = parser.parse_args()
    if args.ab is not None and not (args.ab / "worker").is_dir():
        parser.error(f"--ab {args.ab}: not a source tree of this project (no worker/)")
    trees = [ROOT] if args.ab is None else [args.ab.resolve(), ROOT]
    procs_list = [int(p) for p in args.procs.split(",")]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results: dict[tuple[Path, int], list[Drain]] = {}
    for rnd in range(args.rounds):
        for procs in procs_list:
            for tree in trees if rnd % 2 == 0 else trees[::-1]:
                d = drain(tree, args.tasks, procs, args.syscalls)
                results.setdefault((tree, procs), []).append(d)
                print(
                    f"round {rnd + 1} {tree} x{procs}: {d.total:.0f} us/task = start-up "
                    f"{d.startup:.0f} + drain {d.drain:.0f} (loop {d.drain_loop:.0f}, kernel "
                    f"{d.drain_sys:.0f}) + tail "
                    f"{d.tail:.0f}; {d.tasks_per_s:.0f} tasks/s",
                    flush=True,
                )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"medians [range] of {args.rounds} round(s), {args.tasks} tasks, us of CPU per task")
    for (tree, procs), ds in results.items():
        print(
            f"{tree} x{procs}: total {_median([d.total for d in ds])}, start-up "
            f"{_median([d.startup for d in ds])}, drain {_median([d.drain for d in ds])} "
            f"(loop {_median([d.drain_loop for d in ds])}, kernel "
            f"{_median([d.drain_sys for d in ds])}), tail {_median([d.tail for d in ds])}"
        )
        if args.syscalls:
            names = sorted({n for d in ds for n in d.counts})
            print(
                "  per task: "
                + ", ".join(
                    f"{n} {statistics.median(d.counts.get(n, 0.0) for d in ds):.3f}" for n in names
                )
            )


if __name__ == "__main__":
    main()
