"""Peak RSS of an idle-to-busy worker (embedded rail, no-op ``python`` executor) and where it goes.

    python -m bench.memory [--tasks 2000] [--concurrency 10] [--root DIR ...] [--top 15]

Each ``--root`` is a source tree to measure (default: this one; add a worktree of an older
commit, ``git worktree add /tmp/before HEAD~3``, to compare before/after in the same run). Per
root, two real ``worker run`` processes on a fresh SQLite rail, each started idle on an empty
queue, then given N no-op tasks, stopped by SIGTERM once all are done:

1. clean: its own peak RSS (``VmHWM``, sampled by :mod:`bench.rss`; ``wait4``'s figure counts
   the forked copy of this process);
2. profiled: the same with an import hook that reads the RSS around each module's execution, so
   each module's own cost (its RSS growth less its imports') is printed, top ``--top`` modules
   and per top-level package. The hook's own cost is small but not zero: the clean run's figure
   is the one to quote.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE_KIB


class _CostFinder(importlib.abc.MetaPathFinder):
    """Wraps every module's ``exec_module``: RSS before/after, less its nested imports."""

    def __init__(self) -> None:
        self.costs: dict[str, int] = {}  # module -> own KiB
        self._stack: list[int] = []  # nested imports' KiB, per module being executed

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                self._wrap(spec)
                return spec
        return None

    def _wrap(self, spec: importlib.machinery.ModuleSpec) -> None:
        """Time the loader's ``exec_module`` on the loader itself (an instance attribute), so
        what else it offers (resource readers) stays; class loaders (builtins) are left alone."""
        loader = spec.loader
        inner = getattr(loader, "exec_module", None)
        if inner is None or isinstance(loader, type):
            return
        finder = self

        def exec_module(module: ModuleType) -> None:
            before = _rss_kib()
            finder._stack.append(0)
            try:
                inner(module)
            finally:
                nested = finder._stack.pop()
                total = _rss_kib() - before
                finder.costs[spec.name] = total - nested
                if finder._stack:
                    finder._stack[-1] += total

        loader.exec_module = exec_module  # type: ignore[union-attr,method-assign]


def _child(root: str, config: str, costs_out: str) -> None:
    """The measured worker: ``worker run --config`` from ``root`` (import hook if ``costs_out``)."""
    sys.path.insert(0, root)
    finder = None
    if costs_out:
        finder = _CostFinder()
        sys.meta_path.insert(0, finder)
    sys.argv = ["backlog-worker", "run", "--config", config]
    from worker.cli import main

    try:
        main()
    finally:
        if finder is not None:
            Path(costs_out).write_text(json.dumps(finder.costs))


def _run(root: Path, tasks: int, concurrency: int, profiled: bool) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import anyio

    from bench.rss import reap, vm_hwm_kib
    from bench.worker import _config, _seed

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        anyio.run(_seed, db, 0)
        config = _config(tmp, db, concurrency, drain=False)
        costs = tmp / "costs.json" if profiled else None
        argv = [sys.executable, __file__, "--child", str(root), str(config), str(costs or "")]
        env = {**os.environ, "PYTHONPATH": str(root)}
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_for(lambda: _opened(proc.pid, db), 30, "the worker to open the rail", proc)
            time.sleep(1.0)  # idle on an empty queue first (a benchmark, not a test)
            idle = (vm_hwm_kib(proc.pid) or 0) / 1024
            _add(db, tasks)
            _wait_for(lambda: _completed(db) >= tasks, 300, f"{tasks} completed runs", proc)
        finally:
            proc.send_signal(signal.SIGTERM)
        ((peak, cpu),) = reap([proc])
        if proc.returncode != 0:
            stderr = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise SystemExit(f"worker exited {proc.returncode}: {stderr}")
        out: dict[str, Any] = {"idle_mib": idle, "peak_mib": peak, "cpu_s": cpu}
        if costs is not None:
            out["costs"] = json.loads(costs.read_text())
        return out


def _wait_for(check: Any, timeout_s: float, what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            stderr = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise SystemExit(f"worker exited {proc.returncode} before {what}: {stderr}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling a real condition under a deadline


def _opened(pid: int, db: Path) -> bool:
    """Whether process ``pid`` has the rail's file open (it is up: config read, tracker open)."""
    try:
        return any(os.readlink(fd) == str(db) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _add(db: Path, n: int) -> None:
    import anyio

    from bench.worker import PIPELINE
    from tracker_client.factory import open_tracker
    from tracker_client.models import TaskCreate

    async def add() -> None:
        tracker = await open_tracker(f"sqlite:///{db}")
        try:
            pid = await tracker.create_pipeline("busy", PIPELINE)
            for start in range(0, n, 500):
                batch = range(start, min(n, start + 500))
                await tracker.create_tasks(
                    [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in batch]
                )
        finally:
            await tracker.aclose()

    anyio.run(add)


def _completed(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute("SELECT count(*) FROM runs WHERE status = 'completed'").fetchone()[0]
        )


def _report(root: Path, clean: dict[str, Any], profiled: dict[str, Any], top: int) -> None:
    costs: dict[str, int] = profiled["costs"]
    print(
        f"{root}: peak RSS idle {clean['idle_mib']:.1f} MiB, busy {clean['peak_mib']:.1f} MiB "
        f"(profiled run {profiled['peak_mib']:.1f})"
    )
    print(f"  imports: {len(costs)} modules, {sum(costs.values()) / 1024:.1f} MiB of RSS growth")
    packages: dict[str, int] = {}
    for name, kib in costs.items():
        packages[name.split(".")[0]] = packages.get(name.split(".")[0], 0) + kib
    print(
        "  top packages (MiB): "
        + ", ".join(
            f"{name} {kib / 1024:.1f}"
            for name, kib in sorted(packages.items(), key=lambda x: -x[1])[:top]
        )
    )
    print(
        "  top modules (own MiB): "
        + ", ".join(
            f"{name} {kib / 1024:.1f}"
            for name, kib in sorted(costs.items(), key=lambda x: -x[1])[:top]
        )
    )


def main() -> None:
    """Measure each root and print its peak RSS and top import costs."""
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--root", action="append", type=Path, default=[])
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    roots = [r.resolve() for r in args.root] or [ROOT]
    for root in roots:
        if not (root / "worker" / "cli").is_dir():
            parser.error(f"--root {root}: not a source tree of this project (no worker/cli)")
    for root in roots:
        clean = _run(root, args.tasks, args.concurrency, profiled=False)
        profiled = _run(root, args.tasks, args.concurrency, profiled=True)
        _report(root, clean, profiled, args.top)


if __name__ == "__main__":
    main()
