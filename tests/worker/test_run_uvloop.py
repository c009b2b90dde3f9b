"""``worker run`` runs its event loop on uvloop where uvloop is installed, and drains on it.

A real ``worker run`` process (drain mode) on a real embedded rail: its ``python`` executor
records the running loop's class for each task, and every task is transitioned.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.worker.daemonkit import add_task, clean_env, make_rail

pytestmark = pytest.mark.timeout(90)

RECORDER = """
import asyncio
from pathlib import Path

from plugins.api import Transition

async def record(ctx):
    loop = type(asyncio.get_running_loop())
    with open(Path(__file__).with_name("loops.txt"), "a") as f:
        f.write(f"{loop.__module__}.{loop.__qualname__}\\n")
    return Transition()
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed")
def test_the_worker_drains_on_uvloop(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    for i in range(3):
        add_task(db, f"t{i}")
    (tmp_path / "loopcheck.py").write_text(RECORDER)
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[tracker]\nurl = "sqlite://{db}"\n'
        "[worker]\nconcurrency = 2\ndrain = true\nidle_min_s = 0.05\nidle_max_s = 0.2\n"
        '[[roles]]\nname = "coder"\nexecutor = "python"\n'
        '[roles.options]\ncallable = "loopcheck:record"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(PYTHONPATH=str(tmp_path)),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "loops.txt").read_text().split() == ["uvloop.Loop"] * 3
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (completed,) = conn.execute(
            "SELECT count(*) FROM runs WHERE status = 'completed'"
        ).fetchone()
    assert completed == 3
