"""The quality bar is part of the suite: mypy --strict and ruff stay clean on every change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


@pytest.mark.timeout(300)
def test_mypy_strict_is_clean() -> None:
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_lint_is_clean() -> None:
    result = run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
