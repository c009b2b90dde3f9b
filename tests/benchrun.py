"""Running a ``bench`` module as its user does: ``python -m bench.NAME`` from the clone's root,
the clone first on the import path, its output captured as text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "run_bench"]

#: The clone's root (the ``bench`` package and the project beside it).
ROOT = Path(__file__).resolve().parents[1]


def run_bench(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` from :data:`ROOT`, stopped after ``timeout`` seconds."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
