"""``bench.peers_pickup.StampPipe``: the pickup bench reads the executors' stamps through a
named pipe, sleeping until a line comes instead of reading a file every millisecond inside
each measured pickup. Real child processes write the stamps as the workers do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from bench import peers_pickup
from bench.peers_pickup import StampPipe
from bench.peers_stamp import ENV

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]


def _child(code: str, pipe: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, ENV: str(pipe), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)


def test_a_stamp_written_by_a_worker_process_is_read_from_the_pipe(tmp_path: Path) -> None:
    pipe = StampPipe(tmp_path / "stamps")
    try:
        assert pipe.path.is_fifo()
        # the stamp as every worker writes it (bench.peers_stamp), after another sample's
        code = (
            "import time\nfrom bench.peers_stamp import write_stamp\n"
            "write_stamp('other')\ntime.sleep(0.2)\nwrite_stamp('mine')\ntime.sleep(30)\n"
        )
        proc = _child(code, pipe.path)
        try:
            before = time.time()
            at = anyio.run(pipe.wait, "mine", proc)
            assert before < at <= time.time()
            assert anyio.run(pipe.wait, "other", proc) < at  # kept for its own wait
        finally:
            proc.kill()
            proc.wait(30)
    finally:
        pipe.close()
        pipe.close()  # idempotent


def test_a_line_split_across_writes_is_read_whole(tmp_path: Path) -> None:
    pipe = StampPipe(tmp_path / "stamps")
    try:
        code = (
            "import os, sys, time\nfd = os.open(sys.argv[1], os.O_WRONLY)\n"
            "os.write(fd, b's1 12.')\ntime.sleep(0.3)\nos.write(fd, b'5\\n')\ntime.sleep(30)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-c", code, str(pipe.path)], env=env)
        try:
            assert anyio.run(pipe.wait, "s1", proc) == 12.5
        finally:
            proc.kill()
            proc.wait(30)
    finally:
        pipe.close()


def test_a_worker_that_exits_before_stamping_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers_pickup, "ALIVE_CHECK_S", 0.05)
    pipe = StampPipe(tmp_path / "stamps")
    try:
        proc = _child("raise SystemExit(3)", pipe.path)
        proc.wait(30)
        with pytest.raises(RuntimeError, match=r"the worker exited \(3\) before s1 started"):
            anyio.run(pipe.wait, "s1", proc)
    finally:
        pipe.close()


def test_a_stamp_that_never_comes_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers_pickup, "STAMP_TIMEOUT_S", 0.3)
    monkeypatch.setattr(peers_pickup, "ALIVE_CHECK_S", 0.05)
    pipe = StampPipe(tmp_path / "stamps")
    try:
        proc = _child("import time\ntime.sleep(30)\n", pipe.path)
        try:
            with pytest.raises(RuntimeError, match="s1 did not start within 0 s"):
                anyio.run(pipe.wait, "s1", proc)
        finally:
            proc.kill()
            proc.wait(30)
    finally:
        pipe.close()


_SPIN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def test_a_workers_cpu_counts_the_processes_it_forked() -> None:
    # A peer's worker may run its jobs in forked children (Celery's prefork pool): the tree's
    # CPU is the worker's. A child spins 0.3 s of CPU and says so; the parent stays idle.
    code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {_SPIN + 'print(1, flush=True)'!r}"
        ", '-'], stdout=sys.stdout)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"1"  # the child has spun
        assert peers_pickup.tree_cpu_s(proc.pid) >= 0.25
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()  # type: ignore[union-attr]


def test_the_cpu_table_gives_each_system_its_cost_per_sample() -> None:
    lines = peers_pickup.cpu_lines(
        ["postgres", "arq", "huey"],
        {"postgres": [0.005] * 4, "arq": [0.03] * 2, "huey": []},
        {"postgres": (0.01, 0.02), "arq": (0.004, None)},
    )
    assert "| postgres | 2.50 | 5.00 |" in lines
    assert "| arq | 2.00 | - |" in lines  # no server measured
    assert not any(line.startswith("| huey") for line in lines)  # no samples: no row
