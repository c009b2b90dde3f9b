"""Helpers for the unit-file tests: read a unit's settings, run ``systemd-analyze`` on it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.needs import mark_needs

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
# Skipped only outside CI: .ci/run installs systemd, so in CI a missing tool is a failure.
needs_analyze = mark_needs(
    SYSTEMD_ANALYZE is not None, "systemd-analyze is not installed (apt install systemd)"
)
# verify resolves User=/Group= only on some versions and setups; that user is created at
# install time (README), so its absence here is the only complaint we accept.
HARMLESS = re.compile(r"(user|group)[^\n]*backlog-worker[^\n]*(not found|no such|unknown)", re.I)


def settings(text: str) -> dict[str, list[str]]:
    """``Key=value`` settings of a unit (repeated keys collected), comments skipped."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def _analyze() -> str:
    assert SYSTEMD_ANALYZE is not None, "CI needs systemd-analyze: .ci/run installs systemd"
    return SYSTEMD_ANALYZE


def verify(directory: Path, *units: str, user: bool = False) -> list[str]:
    """Run ``systemd-analyze verify``; return its complaints minus the known-harmless ones."""
    env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "cat"}
    argv = [_analyze()]
    # --user: a runtime dir of its own, short (tempfile's, not under tmp_path): the user
    # manager's sockets live in it, and a socket path longer than sun_path's 108 bytes
    # (pytest-xdist's tmp_path is 10 bytes longer) makes the stock gpg-agent units complain.
    with tempfile.TemporaryDirectory(prefix="bw-rt-") as runtime:
        if user:
            os.chmod(runtime, 0o700)
            env["XDG_RUNTIME_DIR"] = runtime
            argv.append("--user")
        argv += ["verify", "--man=no", *(str(directory / unit) for unit in units)]
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=60, check=False
        )
    complaints = [
        line for line in (proc.stdout + proc.stderr).splitlines() if not HARMLESS.search(line)
    ]
    if proc.returncode != 0 and not complaints:
        complaints = [f"exit status {proc.returncode}"]
    return complaints


def security(unit: Path) -> tuple[float, str]:
    """``systemd-analyze security --offline=yes``: the overall exposure and the full table."""
    env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "cat", "SYSTEMD_COLORS": "0"}
    proc = subprocess.run(
        [_analyze(), "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout + proc.stderr)
    assert found, proc.stdout + proc.stderr
    return float(found.group(1)), proc.stdout


def install(directory: Path, files: dict[str, str]) -> None:
    """Write unit files into ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
