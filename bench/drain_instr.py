"""A real embedded drain's instructions per task: the whole worker process, every thread.

``python -m bench.drain_instr [--tasks N] [--ab OLD_TREE]`` runs ``python -m worker run``
(drain mode, the no-op ``python`` executor, concurrency 10, as ``bench.peers`` runs it) of a
source tree under callgrind twice, on a rail file seeded with N no-op tasks and on an empty one,
and prints ``(total(N) - total(0)) / N``: what a task costs the worker process on its real rail
(the SQLite rules on the database thread and the per-run path on the event loop), start-up and
exit subtracted. ``bench.worker_overhead --callgrind`` counts the per-run path alone, on a stub
rail; this counts everything a drain runs. Unlike CPU time on a shared machine the count does
not move with the load, so it settles what timed rounds leave within their spread
(docs/benchmarks/throughput.md, fifteenth round). ``--ab OLD_TREE`` counts another source tree
first, in the same run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import callgrind
from bench.worker import ROOT, _config, _seed_with, worker_env

__all__ = ["count", "main"]


def count(tree: Path, tasks: int) -> int:
    """The instructions of one drain of ``tasks`` no-op tasks by a worker of ``tree``, from
    exec to exit, every thread (the seeding runs in a process of its own, not counted)."""
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        _seed_with(tree, db, tasks)
        config = _config(tmp, db, 10, drain=True)
        out = tmp / "callgrind.out"
        done = subprocess.run(
            [
                *callgrind.command(out, marks=False),
                *(sys.executable, "-m", "worker", "run", "--config", str(config)),
            ],
            # one hash seed for both drains: dict and set layouts, and so the instructions of
            # start-up, the same in each (the difference is then the tasks')
            env={**worker_env(str(tree)), "PYTHONHASHSEED": "0"},
            cwd=tree,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"the worker of {tree} exited with {done.returncode}: "
                             f"{done.stderr[-2000:]}")  # fmt: skip
        return callgrind.totals(out)


def main() -> None:
    """Parse the arguments, count each tree's empty and full drains, print per task."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks in the drain")
    parser.add_argument("--ab", type=Path, default=None, help="an older source tree, counted first")
    args = parser.parse_args()
    if args.tasks < 1:
        parser.error("--tasks: at least 1")
    if args.ab is not None and not (args.ab / "worker").is_dir():
        parser.error(f"--ab {args.ab}: not a source tree with worker/")
    trees = [ROOT] if args.ab is None else [args.ab.resolve(), ROOT]
    for tree in trees:
        empty = count(tree, 0)
        full = count(tree, args.tasks)
        print(
            f"tree {tree}: empty drain {empty:,}, {args.tasks} tasks {full:,}: "
            f"{(full - empty) / args.tasks / 1000:.1f}k instructions per task",
            flush=True,
        )


if __name__ == "__main__":
    main()
