"""The README's "Operating a rail" tour, run command by command against a real rail."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.cli.conftest import invoke

README = Path(__file__).resolve().parents[2] / "README.md"


def tour_commands() -> list[str]:
    """The shell lines of the section's first ``sh`` block, continuations joined."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Operating a rail", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the section has no sh block"
    joined = block.group(1).replace("\\\n", " ")
    lines = [ln.split("  #", 1)[0].strip() for ln in joined.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_readme_tour_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/rail.db"
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "review.toml").write_text(
        'name = "from-file"\n[definition]\ninitial = "todo"\n'
        '[definition.states.todo]\nagent_role = "coder"\n[definition.states.done]\n'
        'terminal = true\n[[definition.transitions]]\nfrom = "todo"\ntrigger = "complete"\n'
        'to = "done"\n'
    )
    (tmp_path / "tasks.jsonl").write_text('{"title": "a"}\n{"title": "b", "priority": 2}\n')
    (tmp_path / "worker.toml").write_text(
        '[[roles]]\nname = "writer"\nexecutor = "command"\n[roles.options]\nargv = ["/bin/true"]\n'
    )
    task_id = ""
    ran = 0
    for line in tour_commands():
        if line.startswith("export "):
            name, _, _ = line[len("export ") :].partition("=")
            monkeypatch.setenv(name, url)  # the tour's rail, moved into tmp_path
            continue
        args = shlex.split(line)
        assert args[0] == "backlog-worker", line
        args = [task_id if a == "TASK_ID" else a for a in args[1:]]
        expected = 0
        if args[:1] == ["submit"]:
            args[args.index("--timeout") + 1] = "200ms"  # no worker runs here
            expected = 5
        if "--watch" in args:
            args += ["--iterations", "1"]
        result = invoke(args)
        assert result.exit_code == expected, (line, result.output)
        ran += 1
        if args[:3] == ["pipeline", "create", "review"]:
            upstream = invoke(["task", "add", "-p", "review", "upstream", "--json"])
            task_id = json.loads(upstream.stdout)["id"]
    assert ran >= 15
