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

import pytest

from worker.cli import COMMAND_MODULES, COMMAND_SUMMARIES

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (50, 80, 120)

# The group's --help in a fresh interpreter: its text, then (on stderr) the modules it imported.
# With "all", every command is looked up first (what click lists from the commands themselves).
# Both run in a fresh interpreter: click keeps a command's help option once made, and a
# ``click.Context(main)`` made elsewhere in this process (the docs' reference) makes it with
# ``--help`` alone, not the group's ``-h, --help``.
_HELP = """
import json, sys
from worker.cli import COMMAND_MODULES, main
if sys.argv[2] == "all":
    ctx = main.make_context("backlog-worker", [], resilient_parsing=True)
    for name in COMMAND_MODULES:
        assert main.get_command(ctx, name) is not None
for width in json.loads(sys.argv[1]):
    try:
        main(["--help"], prog_name="backlog-worker", terminal_width=width,
             max_content_width=width)
    except SystemExit:
        pass
    print("\\f")
print(json.dumps(sorted(n for n, m in sys.modules.items() if m is not None)), file=sys.stderr)
"""


def _fresh_help(commands: str = "none") -> tuple[list[str], set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_HELP), json.dumps(WIDTHS), commands],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    )
    texts = proc.stdout.split("\f\n")[: len(WIDTHS)]
    return texts, set(json.loads(proc.stderr.splitlines()[-1]))


def test_help_lists_every_command_as_the_commands_say_without_importing_them() -> None:
    texts, modules = _fresh_help()
    registered, _ = _fresh_help("all")
    for width, text, expected in zip(WIDTHS, texts, registered, strict=True):
        assert text == expected, f"width {width}"
    assert "-h, --help" in texts[1]
    assert "  run " in texts[1]
    imported = sorted(set(COMMAND_MODULES.values()) & modules)
    assert imported == [], f"--help imported command modules: {imported}"
    # nor what those modules bring: the configuration's and the rail's models
    assert not {"pydantic", "pydantic_settings", "anyio", "tracker_client"} & modules


def test_every_command_has_a_summary() -> None:
    assert set(COMMAND_SUMMARIES) == set(COMMAND_MODULES)
