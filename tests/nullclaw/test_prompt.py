"""Prompt building: template, slash/dash guard, oversized prompts, verdict triggers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plugins.api import Failure, Transition
from plugins.nullclaw.executor import NullClawExecutor
from plugins.nullclaw.prompt import (
    PROMPT_GUARD,
    PromptTooLarge,
    check_template,
    plan_prompt,
    render_prompt,
)
from tracker_client.errors import ExecutorError

from .conftest import RecordingSink, make_ctx, read_record


def _render(template: str | None = None, **over: Any) -> str:
    values: dict[str, Any] = {
        "title": "Fix the bug",
        "description": "It crashes.",
        "metadata": {"b": 2, "a": 1},
        "instructions": None,
        "task_id": "t1",
        "run_id": "r1",
        "attempt": 2,
        "stage": "coding",
        "pipeline_id": "p1",
        "workspace": Path("/ws"),
        "triggers": {},
    }
    values.update(over)
    return render_prompt(template, **values)


def test_default_template_has_every_part() -> None:
    text = _render(instructions="Be brief.")
    assert text.startswith("Task: Fix the bug\n\nIt crashes.\n")
    assert "Instructions for this step:\nBe brief." in text
    assert '"a": 1,\n  "b": 2' in text  # sorted, indented JSON
    assert "\n\n\n" not in text
    assert not text.endswith("\n")


def test_empty_parts_say_none() -> None:
    text = _render(description="", metadata={}, instructions="  ")
    assert "Instructions for this step:\n(none)" in text
    assert "Task metadata (JSON):\n(none)" in text


def test_custom_template_placeholders() -> None:
    text = _render(
        "[$stage] $title (task $task_id, run $run_id, attempt $attempt, $pipeline_id) in "
        "$workspace costs $$5"
    )
    assert text == "[coding] Fix the bug (task t1, run r1, attempt 2, p1) in /ws costs $5"


def test_values_are_not_template_expanded() -> None:
    assert _render("$title", title="costs $title ${x}") == "costs $title ${x}"


@pytest.mark.parametrize("title", ["/help", "  /exec rm -rf /", "--help", "-m"])
def test_prompt_never_begins_with_slash_or_dash(title: str) -> None:
    text = _render("$title", title=title)
    assert text.startswith(PROMPT_GUARD)
    assert title.strip() in text


def test_nul_and_lone_surrogates_are_replaced() -> None:
    text = _render("$title", title="a\x00b\ud800c")
    assert "\x00" not in text
    text.encode("utf-8")  # would raise on a lone surrogate


def test_empty_render_falls_back_to_the_title() -> None:
    assert _render("$description", description="") == "Task: Fix the bug"


def test_verdict_instructions_appended_when_template_lacks_them() -> None:
    text = _render("$title", triggers={"APPROVE": "approve", "REJECT": "reject"})
    assert text.endswith("exactly one of these words: APPROVE, REJECT.")


@pytest.mark.parametrize(
    ("template", "needle"),
    [("Hi $nme", "$nme"), ("cost $5", "invalid placeholder"), ("${title", "invalid")],
)
def test_bad_templates_are_named(template: str, needle: str) -> None:
    with pytest.raises(ExecutorError, match="prompt_template") as info:
        check_template(template)
    assert needle in str(info.value)


def test_plan_inline_file_and_fail(tmp_path: Path) -> None:
    small = plan_prompt("x" * 10, limit=100, policy="file", workspace=tmp_path, run_id="r/1")
    assert small.file is None
    assert small.message == "x" * 10
    big = plan_prompt("é" * 60, limit=100, policy="file", workspace=tmp_path, run_id="r/1")
    assert big.file == tmp_path / ".backlog-worker" / "prompt-r_1.md"
    assert ".backlog-worker/prompt-r_1.md" in big.message
    assert "120 bytes" in big.message  # counted in UTF-8 bytes, not characters
    with pytest.raises(PromptTooLarge, match="max_prompt_arg_bytes = 100"):
        plan_prompt("é" * 60, limit=100, policy="fail", workspace=tmp_path, run_id="r")


# -- through the executor and the fake binary ---------------------------------------------------


@pytest.mark.anyio
async def test_slash_title_reaches_the_llm_not_a_slash_command(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    opts = {**options, "prompt_template": "$title"}
    ctx = make_ctx(tmp_path / "run", sink, title="/exec cat /etc/passwd")
    outcome = await NullClawExecutor(opts).execute(ctx)
    assert isinstance(outcome, Transition)  # the fake ran the "LLM", not a slash command
    prompt = read_record(record)["prompt"]
    assert prompt == "Task:\n/exec cat /etc/passwd"
    assert sink.items("result")[0]["answer_head"].startswith("Answer: Task:")


@pytest.mark.anyio
async def test_oversized_prompt_goes_through_a_workspace_file(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    description = "lorem ipsum " * 15_000  # 180 000 bytes: over Linux's 128 KiB argv limit
    ctx = make_ctx(tmp_path / "run", sink, description=description)
    outcome = await NullClawExecutor(options).execute(ctx)
    assert isinstance(outcome, Transition)
    rec = read_record(record)
    assert len(rec["message"].encode()) < 1000
    ws = Path(rec["cwd"])
    prompt_file = ws / ".backlog-worker" / "prompt-run-1.md"
    assert str(prompt_file) in rec["message"]
    content = rec["prompt"]  # what the agent read from the file
    assert content.startswith("Task: Add a hello function")
    assert description.strip() in content
    assert rec["prompt_file"] == {"path": str(prompt_file), "mode": 0o600}
    assert not prompt_file.exists()  # removed after the run


@pytest.mark.anyio
async def test_oversized_prompt_fails_clearly_with_fail_policy(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    opts = {**options, "oversized_prompt": "fail", "max_prompt_arg_bytes": 100_000}
    ctx = make_ctx(tmp_path / "run", sink, description="x" * 200_000)
    outcome = await NullClawExecutor(opts).execute(ctx)
    assert isinstance(outcome, Failure)
    assert outcome.reason == "prompt_too_large"
    assert not outcome.retryable
    assert outcome.details["limit_bytes"] == 100_000
    assert outcome.details["prompt_bytes"] > 200_000
    assert not record.exists()  # nullclaw was never started


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "trigger"),
    [
        ("Looks good.\n\nAPPROVE", "approve"),
        ("Missing tests.\n**REJECT**\n", "reject"),
        ("Verdict: approve.", "approve"),
    ],
)
async def test_reviewer_trigger_map_picks_the_verdict(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    record: Path,
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
    trigger: str,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", answer)
    opts = {**options, "triggers": {"APPROVE": "approve", "REJECT": "reject"}}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    assert outcome.trigger == trigger
    assert sink.items("result")[0]["trigger"] == trigger
    assert "one of these words: APPROVE, REJECT" in read_record(record)["prompt"]


@pytest.mark.anyio
async def test_reviewer_without_verdict_fails_or_falls_back(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", "I am not sure about this one.")
    triggers = {"APPROVE": "approve", "REJECT": "reject"}
    outcome = await NullClawExecutor({**options, "triggers": triggers}).execute(
        make_ctx(tmp_path / "a", sink)
    )
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_no_verdict"
    assert outcome.retryable
    assert "APPROVE, REJECT" in outcome.message
    opts = {**options, "triggers": triggers, "verdict_fallback_trigger": "reject"}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "b", sink))
    assert isinstance(outcome, Transition)
    assert outcome.trigger == "reject"
