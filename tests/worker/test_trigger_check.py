"""``backlog-worker check`` warns about ``[roles.triggers]`` entries the rail's pipelines make
useless (a misspelled pipeline or stage) or wrong (a trigger the stage does not have)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from click.testing import CliRunner

from tracker_client.factory import open_tracker
from worker.cli import main

ARTICLE = {
    "initial": "draft",
    "states": {
        "draft": {"agent_role": "writer"},
        "edit": {"agent_role": "writer"},
        "proof": {"agent_role": "proofreader"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "draft", "to": "edit", "trigger": "submit"},
        {"from": "edit", "to": "proof", "trigger": "approve"},
        {"from": "edit", "to": "draft", "trigger": "reject"},
        {"from": "proof", "to": "done", "trigger": "complete"},
    ],
}


def _checked(
    tmp_path: Path, roles: str, check: str = "triggers"
) -> tuple[int, list[tuple[str, str]], str]:
    """``check --json`` of ``roles`` against the ``article`` pipeline: (exit code, the
    (level, detail) of each ``check`` entry (the trigger checks by default), stdout)."""
    url = f"sqlite:///{tmp_path}/rail.db"

    async def seed() -> None:
        tracker = await open_tracker(url)
        try:
            await tracker.create_pipeline("article", ARTICLE)
        finally:
            await tracker.aclose()

    anyio.run(seed)
    config = tmp_path / "worker.toml"
    config.write_text(roles)
    result = CliRunner().invoke(
        main, ["check", "--config", str(config), "--tracker", url, "--json"]
    )
    report = json.loads(result.stdout)
    found = [(c["level"], c["detail"]) for c in report["checks"] if c["name"] == check]
    return result.exit_code, found, result.stdout


PASS = json.dumps([sys.executable, "-c", "pass"])


def test_check_warns_about_trigger_entries_that_cannot_apply(tmp_path: Path) -> None:
    code, found, stdout = _checked(
        tmp_path,
        f"""
[[roles]]
name = "writer"
executor = "command"
[roles.options]
argv = {PASS}
[roles.triggers]
"article.edit" = "approve"   # fine
"artcle.edit" = "approve"    # a misspelled pipeline
"article.proof" = "complete" # another role's stage
"article" = "approve"        # draft has no 'approve'
""",
    )
    assert [detail for _level, detail in found] == [
        "role writer: [roles.triggers] 'artcle.edit' names no stage of role writer in any pipeline",
        "role writer: [roles.triggers] 'article.proof' names no stage of role writer in any "
        "pipeline",
        "role writer: [roles.triggers] 'article' = 'approve': stage 'draft' of pipeline 'article' "
        "has no such trigger (it has: submit)",
    ]
    assert all(level == "warn" for level, _detail in found)
    assert json.loads(stdout)["ok"] is True and code == 0  # a warning: pipelines may come later


def test_a_misspelt_exit_code_trigger_fails_the_check(tmp_path: Path) -> None:
    code, found, _ = _checked(
        tmp_path,
        f'[[roles]]\nname = "proofreader"\nexecutor = "command"\n[roles.options]\n'
        f'argv = {PASS}\nexit_codes = {{ "0" = "complet" }}\n',
    )
    assert found == [
        (
            "fail",
            "role proofreader: exit_codes \"0\" sends trigger 'complet', which no stage it works "
            "on has (stage 'proof' of pipeline 'article' has complete); did you mean 'complete'?",
        )
    ]
    assert code == 1  # it would dead-letter every task at run time (invalid_trigger)


def test_a_trigger_right_for_some_stages_only_is_a_warning(tmp_path: Path) -> None:
    code, found, _ = _checked(
        tmp_path,
        f'[[roles]]\nname = "writer"\nexecutor = "command"\n[roles.options]\n'
        f'argv = {PASS}\nexit_codes = {{ "0" = "", "3" = "reject" }}\n',
    )
    assert found == [
        (
            "warn",
            "role writer: exit_codes \"3\" sends trigger 'reject', which stage 'draft' of "
            "pipeline 'article' has submit instead (a run there would fail)",
        )
    ]
    assert code == 0


def test_default_trigger_is_held_against_the_stages_it_decides(tmp_path: Path) -> None:
    # draft has one way out (it is taken whatever default_trigger says); edit has two
    code, found, _ = _checked(
        tmp_path,
        f'[[roles]]\nname = "writer"\nexecutor = "command"\ndefault_trigger = "aprove"\n'
        f"[roles.options]\nargv = {PASS}\n",
    )
    assert found == [
        (
            "fail",
            "role writer: default_trigger sends trigger 'aprove', which no stage it works on has "
            "(stage 'edit' of pipeline 'article' has approve, reject); did you mean 'approve'?",
        )
    ]
    assert code == 1
    # a [roles.triggers] entry decides that stage instead: the default is never used
    (tmp_path / "again").mkdir()
    code, found, _ = _checked(
        tmp_path / "again",
        f'[[roles]]\nname = "writer"\nexecutor = "command"\ndefault_trigger = "aprove"\n'
        f'[roles.options]\nargv = {PASS}\n[roles.triggers]\n"article.edit" = "approve"\n',
    )
    assert (code, found) == (0, [])


def test_a_python_jobs_literal_triggers_are_checked(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "article_jobs.py").write_text(
        "from plugins.api import Transition\n\n\n"
        "def other(ctx):\n    return Transition('nonsense')  # another role's job: not read\n\n\n"
        "def edit(ctx):\n"
        "    if ctx.task.title == 'bad':\n"
        "        return Transition('rejct')\n"
        "    return {'trigger': 'approve'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, found, _ = _checked(
        tmp_path,
        '[[roles]]\nname = "writer"\nexecutor = "python"\n'
        '[roles.options]\ncallable = "article_jobs:edit"\n',
    )
    assert found == [
        (
            "fail",
            "role writer: Transition(...) in article_jobs:edit, line 10 sends trigger 'rejct', "
            "which no stage it works on has (stage 'draft' of pipeline 'article' has submit; "
            "stage 'edit' of pipeline 'article' has approve, reject); did you mean 'reject'?",
        ),
        (
            "warn",
            "role writer: a returned dict in article_jobs:edit, line 11 sends trigger 'approve', "
            "which stage 'draft' of pipeline 'article' has submit instead (a run there would "
            "fail)",
        ),
    ]
    assert code == 1


def test_nullclaw_verdict_triggers_are_checked(tmp_path: Path) -> None:
    code, found, _ = _checked(
        tmp_path,
        '[[roles]]\nname = "proofreader"\nexecutor = "nullclaw"\n'
        '[roles.options]\nprovider = "openai"\nmodel = "m"\n'
        'triggers = { DONE = "complete", NOPE = "send_back" }\n',
    )
    assert found == [
        (
            "fail",
            "role proofreader: triggers.NOPE sends trigger 'send_back', which no stage it works on "
            "has (stage 'proof' of pipeline 'article' has complete)",
        )
    ]
    assert code == 1


def test_check_warns_about_a_role_no_stage_names(tmp_path: Path) -> None:
    """A misspelt role would claim nothing and wait in silence: ``check`` says so, naming the
    roles the rail's stages have (a warning: its pipeline may be created later)."""
    code, found, stdout = _checked(
        tmp_path,
        f'[[roles]]\nname = "writer"\nexecutor = "command"\n[roles.options]\nargv = {PASS}\n'
        f'[[roles]]\nname = "writr"\nexecutor = "command"\n[roles.options]\nargv = {PASS}\n',
        check="roles",
    )
    assert found == [
        (
            "warn",
            "role writr: no stage of any pipeline on the rail has agent_role 'writr', so it "
            "would claim nothing (roles of the rail's stages: proofreader, writer); did you "
            "mean 'writer'?",
        )
    ]
    assert json.loads(stdout)["ok"] is True and code == 0
