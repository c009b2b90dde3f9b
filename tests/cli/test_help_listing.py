"""``backlog-worker --help`` lists every command without importing any command's module (issue
31, start-up): its listing is written from ``COMMAND_SUMMARIES``, which must say what each
command says of itself, at every width."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from worker.cli import COMMAND_MODULES, COMMAND_SUMMARIES, main

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (50, 80, 120)

# The group's --help in a fresh interpreter: its text, then (on stderr) the modules it imported.
_HELP = """
import json, sys
from worker.cli import main
for width in json.loads(sys.argv[1]):
    try:
        main(["--help"], prog_name="backlog-worker", terminal_width=width,
             max_content_width=width)
    except SystemExit:
        pass
    print("\\f")
print(json.dumps(sorted(n for n, m in sys.modules.items() if m is not None)), file=sys.stderr)
"""


def _fresh_help() -> tuple[list[str], set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_HELP), json.dumps(WIDTHS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    )
    texts = proc.stdout.split("\f\n")[: len(WIDTHS)]
    return texts, set(json.loads(proc.stderr.splitlines()[-1]))


def _registered_help(width: int) -> str:
    """The group's --help once every command is imported (what click lists from them)."""
    ctx = click.Context(main)
    for name in COMMAND_MODULES:
        assert main.get_command(ctx, name) is not None
    result = CliRunner().invoke(
        main,
        ["--help"],
        prog_name="backlog-worker",
        terminal_width=width,
        max_content_width=width,
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_help_lists_every_command_as_the_commands_say_without_importing_them() -> None:
    texts, modules = _fresh_help()
    for width, text in zip(WIDTHS, texts, strict=True):
        assert text == _registered_help(width), f"width {width}"
    assert "  run " in texts[1]
    imported = sorted(set(COMMAND_MODULES.values()) & modules)
    assert imported == [], f"--help imported command modules: {imported}"
    # nor what those modules bring: the configuration's and the rail's models
    assert not {"pydantic", "pydantic_settings", "anyio", "tracker_client"} & modules


def test_every_command_has_a_summary() -> None:
    assert set(COMMAND_SUMMARIES) == set(COMMAND_MODULES)
