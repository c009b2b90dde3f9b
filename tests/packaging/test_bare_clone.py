"""The README's test command passes in a bare clone with nothing beside it.

The working tree (tracked and untracked, not ignored) is copied where no sibling checkout is
beside it; the suite is collected there and the tests that need the sibling (NullTickets' own
e2e suite) are run: they skip, giving the reason, and with ``CI=true`` they fail saying CI must
run them (:mod:`tests.needs`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
#: The tests that use something beside the clone.
BESIDE = ["tests/remote/test_upstream_e2e.py"]


@pytest.fixture(scope="module")
def bare_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout's files in an otherwise empty directory."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of the clone's files")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    clone = tmp_path_factory.mktemp("alone") / "backlog-worker"
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    assert not (clone.parent / "shared").exists()
    return clone


def _pytest(clone: Path, *args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def test_the_whole_suite_collects_in_a_bare_clone(bare_clone: Path) -> None:
    proc = _pytest(bare_clone, "--collect-only", "-q", ci=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert re.search(r"^\d{4,} tests collected", proc.stdout, re.M), proc.stdout[-2000:]


def test_what_needs_the_sibling_checkout_skips_with_its_reason(bare_clone: Path) -> None:
    proc = _pytest(bare_clone, *BESIDE, ci=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"\b1 skipped\b", proc.stdout), proc.stdout[-4000:]
    assert "NullTickets' e2e suite" in proc.stdout and "does not exist" in proc.stdout


def test_in_ci_what_needs_the_sibling_checkout_fails(bare_clone: Path) -> None:
    proc = _pytest(bare_clone, *BESIDE, ci=True)
    assert proc.returncode == 1, proc.stdout[-4000:]
    assert re.search(r"\b1 failed\b", proc.stdout), proc.stdout[-4000:]
    assert "CI must run this test" in proc.stdout
