"""Running a page's walkthrough as a reader would: its files written, its commands run by ``sh``.

A page's blocks are taken in order: a block with a ``title="path"`` is a file the reader
writes (written to the walkthrough's directory), a ``sh`` block is commands the reader types
(each run by ``sh -c`` in that directory, with this interpreter's ``backlog-worker`` first on
``PATH``). ``TASK_ID`` in a command stands for the id the last ``task add`` printed, as the
pages say; ``export NAME=VALUE`` lines set the environment of the later commands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.blocks import Block, shell_commands

__all__ = ["Walkthrough"]

_CREATED_TASK = re.compile(r"created task ([0-9a-f-]{36})")


def _clean_env() -> dict[str, str]:
    """The suite's environment without any rail setting, ``backlog-worker`` first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "160"
    return env


@dataclass
class Walkthrough:
    """One reader's session in ``cwd``: the files and commands of a page's blocks."""

    cwd: Path
    #: ``adapt(command) -> (command, expected exit code)``: what a test must change to run a
    #: command unattended (a ``--wait`` that no worker would end, a live ``--watch``).
    adapt: Callable[[str], tuple[str, int]] = lambda command: (command, 0)
    env: dict[str, str] = field(default_factory=_clean_env)
    task_id: str = ""
    ran: list[str] = field(default_factory=list)

    def block(self, block: Block) -> list[subprocess.CompletedProcess[str]]:
        """Write a titled block's file, or run a ``sh`` block's commands; their results."""
        if block.title:
            path = self.cwd / block.title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.body, encoding="utf-8")
            return []
        assert block.lang == "sh", f"{block.where}: a walkthrough block is a file or sh"
        return [self.command(line, block) for line in shell_commands(block.body)]

    def command(self, line: str, block: Block) -> subprocess.CompletedProcess[str]:
        """Run one command line as typed (``TASK_ID`` replaced); it must exit as expected."""
        line, expected = self.adapt(line)
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = value.replace("$PWD", str(self.cwd))
            return subprocess.CompletedProcess(line, 0, "", "")
        if "TASK_ID" in line:
            assert self.task_id, f"{block.where}: {line!r} needs a task added before it"
            line = line.replace("TASK_ID", self.task_id)
        proc = subprocess.run(
            ["sh", "-c", line],
            cwd=self.cwd,
            env={**self.env, "PWD": str(self.cwd)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == expected, (block.where, line, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, (block.where, line, proc.stderr)
        if created := _CREATED_TASK.findall(proc.stdout):
            self.task_id = created[-1]
        self.ran.append(line)
        return proc
