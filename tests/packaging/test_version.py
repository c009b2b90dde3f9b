"""One version everywhere: ``backlog-worker --version`` is the installed package's metadata,
which is ``pyproject.toml``'s, and CHANGELOG.md has an entry for it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_version_is_the_package_metadata() -> None:
    installed = metadata.version("backlog-worker")
    assert installed == VERSION, "the installed metadata is stale: pip install -e '.[test]'"
    script = Path(sys.executable).with_name("backlog-worker")  # the installed entry point
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout == f"backlog-worker, version {installed}\n"


def test_the_changelog_records_this_version() -> None:
    """A released version is in the changelog; between releases the version is the next one's
    development version (``0.2.0.dev0``: workers of the tree and of the last release tell
    themselves apart in the worker registry), after the newest release recorded."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    released = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", text, re.M)
    versions = [version for version, _ in released]
    dev = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)\.dev\d+", VERSION)
    if dev is None:
        assert VERSION in versions, released
        return
    newest = tuple(int(p) for p in versions[0].split("."))
    assert tuple(int(p) for p in dev.groups()) > newest, (VERSION, versions[0])
