"""The nullclaw executor against the fake binary: success and every failure row of the CLI."""

from __future__ import annotations

import hashlib
import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from plugins.api import Failure, Transition
from plugins.nullclaw.executor import NullClawExecutor

from .conftest import RecordingSink, make_ctx, read_record

pytestmark = pytest.mark.anyio


async def test_success_saves_answer_artifact_and_result_event(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    record: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", "def hello():\n    return 'hi'")
    ctx = make_ctx(tmp_path / "run", sink, instructions="Keep it short.")
    outcome = await NullClawExecutor(options).execute(ctx)

    assert isinstance(outcome, Transition)
    assert outcome.trigger is None  # the role's default trigger
    [art] = sink.artifacts
    path = Path(art.uri.removeprefix("file://"))
    data = path.read_bytes()
    assert data == b"def hello():\n    return 'hi'"  # header line and final newline stripped
    assert art.kind == "file"
    assert art.sha256 == hashlib.sha256(data).hexdigest()
    assert art.size_bytes == len(data)
    assert (art.task_id, art.run_id) == ("task-1", "run-1")
    assert art.meta["truncated"] is False
    assert art.meta["header"] == ["Sending to fakellm..."]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    [result] = sink.items("result")
    assert result["answer_head"] == "def hello():\n    return 'hi'"
    assert result["artifact_id"] == "artifact-1"
    assert result["sha256"] == art.sha256
    assert sink.events[-1][0] == "result"  # flushed last, after the progress

    rec = read_record(record)
    ws = tmp_path / "run" / "workspace"
    assert rec["cwd"] == str(ws)
    assert rec["env"]["NULLCLAW_WORKSPACE"] == str(ws)
    assert rec["env"]["HOME"] == str(tmp_path / "run" / "nullclaw-home")
    assert rec["argv"][1:3] == ["agent", "-m"]
    prompt = rec["prompt"]
    assert prompt.startswith("Task: Add a hello function")
    assert "Write hello() returning 'hi'." in prompt
    assert "Keep it short." in prompt
    assert '"repo": "demo"' in prompt
    assert rec["config"]["agents"]["defaults"]["model"]["primary"] == "fakellm/fake-model"
    assert rec["config"]["memory"]["backend"] == "none"
    assert path.parent.parent == ws  # the answer lives in the workspace


async def test_child_env_is_minimal_and_has_no_tracker_token(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    record: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "tracker-secret-123")
    monkeypatch.setenv("SOME_OTHER_VAR", "x")
    monkeypatch.setenv("MY_LLM_KEY", "llm-key-456")
    opts = {**options, "api_key_env": "MY_LLM_KEY"}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    rec = read_record(record)
    env = rec["env"]
    assert "BACKLOG_WORKER_API_TOKEN" not in env
    assert "SOME_OTHER_VAR" not in env
    assert env["NULLCLAW_API_KEY"] == "llm-key-456"
    assert "tracker-secret-123" not in json.dumps(rec)
    # the key is never written to disk
    config_file = tmp_path / "run" / "nullclaw-home" / ".nullclaw" / "config.json"
    assert "llm-key-456" not in config_file.read_text()
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert "tracker-secret-123" not in json.dumps(sink.events)


async def test_missing_api_key_variable_is_a_config_failure(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    opts = {**options, "api_key_env": "NO_SUCH_KEY_VAR"}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_config_error"
    assert not outcome.retryable
    assert "NO_SUCH_KEY_VAR" in outcome.message


@pytest.mark.parametrize(
    ("mode", "retries", "name", "retryable"),
    [
        ("http500", None, "AllProvidersFailed", True),
        ("http400", None, "AllProvidersFailed", True),
        ("nonjson", None, "AllProvidersFailed", True),
        ("down", None, "AllProvidersFailed", True),
        ("no_curl", None, "AllProvidersFailed", True),
        ("http429", None, "RateLimited", True),
        ("timeout", None, "AllProvidersFailed", True),
        ("timeout", 0, "CurlFailed", True),
    ],
)
async def test_rc1_provider_errors_are_retryable_and_named(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    retries: int | None,
    name: str,
    retryable: bool,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", mode)
    opts = dict(options)
    if retries is not None:
        opts["provider_retries"] = retries
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_provider_error"
    assert outcome.retryable is retryable
    assert f"error: {name}" in outcome.message
    assert outcome.details["error"] == name
    assert outcome.details["returncode"] == 1
    assert not sink.artifacts


async def test_rc1_other_error_name_is_not_retryable(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "http429")
    opts = {**options, "retryable_errors": ["CurlFailed"]}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_error"
    assert not outcome.retryable
    assert "RateLimited" in outcome.message


async def test_panic_is_named_and_not_retryable(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "panic")
    outcome = await NullClawExecutor(options).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_panic"
    assert "index out of bounds" in outcome.message
    assert not outcome.retryable


async def test_killed_by_signal_names_the_signal(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "selfkill")
    outcome = await NullClawExecutor(options).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_killed"
    assert "SIGKILL" in outcome.message
    assert outcome.details["signal"] == "SIGKILL"
    assert outcome.retryable


async def test_header_without_answer_is_a_retryable_empty_answer(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "empty_answer")
    outcome = await NullClawExecutor(options).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_empty_answer"
    assert outcome.retryable
    assert not sink.artifacts


def _existing_home(tmp_path: Path, config: str | None) -> Path:
    home = tmp_path / "home"
    (home / ".nullclaw").mkdir(parents=True)
    if config is not None:
        (home / ".nullclaw" / "config.json").write_text(config)
    return home


@pytest.mark.parametrize(
    ("config", "expect"),
    [
        (None, "No default model configured"),
        ("{not json", "No default model configured"),
        ('{"default_provider": "x"}', "top-level default_provider is not supported"),
        ('{"agents": {"defaults": {}}}', "No default model configured"),
        (
            '{"agents": {"defaults": {"model": {"primary": "fakellm/m"}}}, '
            '"default_temperature": 5}',
            "temperature must be between 0.0 and 2.0",
        ),
    ],
)
async def test_rc0_without_stdout_is_a_config_error(
    tmp_path: Path,
    fake_bin: Path,
    sink: RecordingSink,
    config: str | None,
    expect: str,
) -> None:
    home = _existing_home(tmp_path, config)
    opts = {"binary": str(fake_bin), "home": str(home)}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_config_error"
    assert not outcome.retryable
    assert expect in outcome.message
    assert any(expect in line for line in outcome.details["stderr"])


async def test_existing_home_is_used_unchanged_with_overrides(
    tmp_path: Path, fake_bin: Path, sink: RecordingSink, record: Path
) -> None:
    config = '{"agents": {"defaults": {"model": {"primary": "fakellm/base"}}}}'
    home = _existing_home(tmp_path, config)
    opts = {
        "binary": str(fake_bin),
        "home": str(home),
        "model": "other-model",
        "temperature": 0.2,
        "env_passthrough": ["FAKE_NULLCLAW_*"],
    }
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    rec = read_record(record)
    assert rec["env"]["HOME"] == str(home)
    assert "--model" in rec["argv"]
    assert rec["argv"][rec["argv"].index("--model") + 1] == "other-model"
    assert rec["argv"][rec["argv"].index("--temperature") + 1] == "0.2"
    assert rec["model"] == "other-model"
    assert (home / ".nullclaw" / "config.json").read_text() == config
    assert sorted(p.name for p in home.iterdir()) == [".nullclaw"]


async def test_missing_binary_fails_clearly(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink
) -> None:
    opts = {**options, "binary": str(tmp_path / "nope" / "nullclaw")}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_not_started"
    assert not outcome.retryable
    assert "nope/nullclaw" in outcome.message
    assert outcome.details["spawn_error"] == "not_found"


async def test_binary_name_not_on_path(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink
) -> None:
    opts = {**options, "binary": "nullclaw-definitely-not-installed"}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_not_started"
    assert "no such executable" in outcome.message


async def test_logs_name_actions_and_never_the_key(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "llm-key-789")
    caplog.set_level(logging.DEBUG)
    ex = NullClawExecutor({**options, "api_key_env": "MY_LLM_KEY"})
    assert isinstance(await ex.execute(make_ctx(tmp_path / "ok", sink)), Transition)
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "http500")
    assert isinstance(await ex.execute(make_ctx(tmp_path / "bad", sink)), Failure)
    ours = [r for r in caplog.records if r.name == "backlog_worker.executor.nullclaw"]
    actions = [getattr(r, "action", None) for r in ours]
    assert actions == [
        "nullclaw_started",
        "nullclaw_succeeded",
        "nullclaw_started",
        "nullclaw_failed",
    ]
    assert all(getattr(r, "task_id", None) == "task-1" for r in ours)
    assert "llm-key-789" not in caplog.text
    assert "llm-key-789" not in repr(ex)


@pytest.mark.parametrize("mode", ["ok", "http500"])
async def test_the_api_key_is_redacted_from_everything_reported(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    key = "sk-live-0123456789abcdef"
    monkeypatch.setenv("MY_LLM_KEY", key)
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", mode)
    monkeypatch.setenv("FAKE_NULLCLAW_LEAK_KEY", "1")
    # streamed 8 characters at a time, so the key is split across progress flushes
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", f"I ran env: NULLCLAW_API_KEY={key} ok")
    monkeypatch.setenv("FAKE_NULLCLAW_DELAY", "0.03")
    opts = {
        **options,
        "api_key_env": "MY_LLM_KEY",
        "provider_retries": 0,
        "progress_interval_s": 0.02,
    }
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    reported = json.dumps([sink.events, [a.model_dump() for a in sink.artifacts]])
    assert key not in reported
    assert key not in repr(outcome)
    for art in sink.artifacts:
        assert key not in Path(art.uri.removeprefix("file://")).read_text()
    assert "[redacted]" in reported or "[redacted]" in repr(outcome)
    progress = sink.items("progress")
    stdout = "".join(p["text"] for p in progress if p["stream"] == "stdout")
    if mode == "ok":
        assert isinstance(outcome, Transition)
        assert "NULLCLAW_API_KEY=[redacted] ok" in stdout
        assert len([p for p in progress if p["stream"] == "stdout"]) > 2  # really split up
    else:
        assert isinstance(outcome, Failure)
        assert "info(agent): using key [redacted]" in outcome.details["stderr_tail"]


async def test_non_executable_binary_fails_without_retry(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink
) -> None:
    plain = tmp_path / "plain-file"
    plain.write_text("not a program")
    outcome = await NullClawExecutor({**options, "binary": str(plain)}).execute(
        make_ctx(tmp_path / "run", sink)
    )
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_not_started"
    assert not outcome.retryable
    assert outcome.details["spawn_error"] == "not_executable"


async def test_oversized_environment_is_a_clear_permanent_failure(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_HUGE", "x" * 200_000)  # over Linux's 128 KiB per string
    outcome = await NullClawExecutor(options).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "nullclaw_not_started"
    assert not outcome.retryable
    assert outcome.details["spawn_error"] == "argument_too_large"
