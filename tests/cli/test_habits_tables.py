"""Tables on a pipe are never folded mid-word; on a terminal they still fit its width.

Runs the real ``backlog-worker`` executable on a real SQLite rail: once with stdout a pipe (as
``| grep`` or ``> file`` sees it), once on a pseudo-terminal 80 columns wide.
"""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.cli.conftest import Rail

#: The script installed beside the interpreter running the tests (the venv's), so the command
#: run is this tree's, not another install found earlier on PATH.
_BESIDE = Path(sys.executable).parent / "backlog-worker"
EXE = str(_BESIDE) if _BESIDE.exists() else shutil.which("backlog-worker") or "backlog-worker"
TITLE = " ".join(f"word{i:02d}" for i in range(40))  # ~280 characters


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    return env


def test_piped_tables_keep_each_row_on_one_line(simple: Rail) -> None:
    task_id = simple.add(TITLE)
    for args in (["task", "list"], ["task", "show", task_id]):
        out = subprocess.run(
            [EXE, *args, "--tracker", simple.url],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        rows = [line for line in out.splitlines() if TITLE in line]
        assert rows, f"{args}: the title was folded:\n{out}"
    listed = subprocess.run(
        [EXE, "task", "list", "--tracker", simple.url],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    [row] = [line for line in listed.splitlines() if task_id in line]
    assert TITLE in row and "todo" in row  # id, title and stage on one line, for grep and cut


@pytest.mark.timeout(60)
def test_terminal_tables_fit_the_terminal(simple: Rail) -> None:
    simple.add(TITLE)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
    env = {**_env(), "TERM": "dumb"}
    with subprocess.Popen(
        [EXE, "task", "list", "--tracker", simple.url],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    ) as proc:
        os.close(follower)
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert proc.wait(timeout=30) == 0, err
    text = b"".join(chunks).decode()
    lines = [line for line in text.replace("\r", "").splitlines() if line.strip()]
    assert "word00" in text and "word39" in text
    assert max(len(line) for line in lines) <= 80, text


def test_piped_console_is_wide(tmp_path: Path) -> None:
    """The console the commands print with: wide on a pipe, whatever $COLUMNS says."""
    from worker.cli.ops.common import PIPED_WIDTH, SafeConsole

    with (tmp_path / "out.txt").open("w") as file:
        assert SafeConsole(file=file).width == PIPED_WIDTH
        assert SafeConsole(file=file, width=50).width == 50
