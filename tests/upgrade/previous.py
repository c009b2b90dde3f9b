"""The previous release, built from the clone's own history, to run beside this one.

CHANGELOG.md records each release with the commit it is (``the state of the project at commit
`abc1234```). :func:`build` checks that commit out with ``git worktree`` into a temporary
directory and installs it into a second venv (its own ``backlog-worker``, its own version), so a
test can run a worker of the previous release and one of this tree on one rail. Outside CI a
clone without that history (a shallow clone, an unpacked archive) skips; in CI it fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests import needs

ROOT = Path(__file__).resolve().parents[2]
_RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\][^\n]*\n(.*?)(?=^## \[|\Z)", re.M | re.S)
_COMMIT = re.compile(r"at commit `([0-9a-f]{7,40})`")


@dataclass(frozen=True)
class Release:
    """A release of the project: its version, commit, source tree and venv's python."""

    version: str
    commit: str
    tree: Path
    python: Path

    def cli(self, *args: str) -> list[str]:
        """The argv of ``backlog-worker ARGS`` of this release: its venv's own script (never
        ``python -m worker``, which would import the tree of the working directory)."""
        return [str(self.python.with_name("backlog-worker")), *args]


def previous_release() -> tuple[str, str]:
    """(version, commit) of the newest release CHANGELOG.md records with a commit."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    for version, body in _RELEASE.findall(text):
        found = _COMMIT.search(body)
        if found is not None:
            return version, found.group(1)
    raise AssertionError("CHANGELOG.md records no release with its commit")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False, timeout=120
    )


def build(where: Path) -> Release:
    """Check the previous release out under ``where`` and install it into its own venv."""
    needs.require_tool("git", "apt-get install -y git")
    version, commit = previous_release()
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        needs.missing(
            f"the clone lacks commit {commit} of release {version} (a shallow clone or an "
            "archive: `git fetch --unshallow`)"
        )
    tree = where / f"backlog-worker-{version}"
    added = _git("worktree", "add", "--detach", "--force", str(tree), commit)
    assert added.returncode == 0, added.stderr
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        # --no-compile: what the tests run is byte-compiled as it is imported
        [str(python), "-m", "pip", "install", "-q", "--no-compile", f"{tree}[postgres]"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    if version == "0.1.0":
        # 0.1.0's postgres extra imported sniffio without declaring it (fixed since): its users
        # had to install it by hand, and so does this harness.
        extra = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-compile", "sniffio"],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert extra.returncode == 0, extra.stderr[-3000:]
    return Release(version, commit, tree, python)


def remove(release: Release) -> None:
    """Drop the release's worktree from the clone's list (its files go with ``where``)."""
    _git("worktree", "remove", "--force", str(release.tree))
