"""What nullclaw is handed stays out of what the run reports and out of ``ps``: secrets passed
through ``env_passthrough`` are redacted from progress events, the answer artifact, the result
event, failure details and the executor's log lines; the prompt reaches the real process through
a workspace file, never its argv (the fake binary records its real ``sys.argv``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from plugins.api import Failure, Transition
from plugins.nullclaw.executor import NullClawExecutor
from tracker_client.errors import ExecutorError

from .conftest import RecordingSink, make_ctx, read_record

pytestmark = pytest.mark.anyio

GITHUB_TOKEN = "ghp_0123456789abcdefGHIJKLMNOPqrstuv"
#: Token-shaped under a name that says nothing.
UPSTREAM_REF = "q8Zk2m9x7Q1w5e4r6t0Yp3"


@pytest.mark.parametrize("mode", ["ok", "http500"])
async def test_passed_through_secrets_are_redacted_from_everything_reported(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", GITHUB_TOKEN)
    monkeypatch.setenv("UPSTREAM_REF", UPSTREAM_REF)
    monkeypatch.setenv("TZ", "Europe/Paris")
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", mode)
    monkeypatch.setenv("FAKE_NULLCLAW_LEAK_ENV", "GITHUB_TOKEN,UPSTREAM_REF,TZ")
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", "I ran env:")
    monkeypatch.setenv("FAKE_NULLCLAW_DELAY", "0.02")
    caplog.set_level(logging.DEBUG)
    opts = {
        **options,
        "env_passthrough": [*options["env_passthrough"], "GITHUB_TOKEN", "UPSTREAM_REF", "TZ"],
        "provider_retries": 0,  # streamed 8 characters at a time: secrets split across flushes
        "progress_interval_s": 0.02,
    }
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    reported = json.dumps([sink.events, [a.model_dump() for a in sink.artifacts]])
    texts = [reported, repr(outcome), caplog.text]
    texts += [Path(a.uri.removeprefix("file://")).read_text() for a in sink.artifacts]
    for text in texts:
        assert GITHUB_TOKEN not in text
        assert UPSTREAM_REF not in text
    stderr = "".join(p["text"] for p in sink.items("progress") if p["stream"] == "stderr")
    assert "GITHUB_TOKEN=[redacted]" in stderr and "UPSTREAM_REF=[redacted]" in stderr
    assert "TZ=Europe/Paris" in stderr  # not a secret: left alone
    if mode == "ok":
        assert isinstance(outcome, Transition)
        stdout = "".join(p["text"] for p in sink.items("progress") if p["stream"] == "stdout")
        assert "GITHUB_TOKEN=[redacted]" in stdout
    else:
        assert isinstance(outcome, Failure)
        assert "info(tool): shell: GITHUB_TOKEN=[redacted]" in outcome.details["stderr_tail"]


async def test_the_prompt_is_not_in_the_process_argv(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    secret_plan = "merge the acquisition memo 7731 before Friday"
    ctx = make_ctx(tmp_path / "run", sink, description=secret_plan)
    outcome = await NullClawExecutor(options).execute(ctx)
    assert isinstance(outcome, Transition)
    rec = read_record(record)
    argv = " ".join(rec["argv"])  # the real process's argv: what ps shows every local user
    assert secret_plan not in argv and "Add a hello function" not in argv
    assert rec["argv"][1:3] == ["agent", "-m"] and len(rec["message"]) < 400
    assert secret_plan in rec["prompt"]  # the agent read it from the file
    assert rec["prompt_file"]["mode"] == 0o600
    assert not Path(rec["prompt_file"]["path"]).exists()  # removed after the run


async def test_inline_prompts_stay_available_by_option(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    opts = {**options, "max_prompt_arg_bytes": 100_000}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    rec = read_record(record)
    assert rec["message"] == rec["prompt"] and rec["prompt_file"] == {}


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"max_prompt_arg_bytes": 500}, r"must be 0 \(every prompt through a file\) or at least"),
        ({"oversized_prompt": "fail"}, "needs 'max_prompt_arg_bytes'"),
    ],
)
def test_prompt_options_are_checked(
    options: dict[str, Any], extra: dict[str, Any], says: str
) -> None:
    with pytest.raises(ExecutorError, match=says):
        NullClawExecutor({**options, **extra})


def test_which_passthrough_values_count_as_secrets() -> None:
    from plugins.nullclaw.redact import run_secrets

    env = {
        "NULLCLAW_API_KEY": "sk-provider-key",
        "GITHUB_TOKEN": "ghp_x1",  # short, but its name says token
        "NPM_PASS": "hunter2",
        "DEPLOY_REF": "a8f3k2m9x7q1w5e4r6t0",  # token-shaped
        "TZ": "Europe/Paris",
        "WORK_DIR": "/srv/work/a8f3k2m9x7q1w5e4r6t0",  # a path
        "NOTE": "see ticket 1234 for details",  # prose
        "NOT_PASSED_TOKEN": "zzzz9999zzzz9999zzzz",  # not in the allowlist
    }
    passthrough = ["GITHUB_TOKEN", "NPM_*", "DEPLOY_REF", "TZ", "WORK_DIR", "NOTE"]
    assert run_secrets(env, passthrough) == [
        "sk-provider-key",
        "ghp_x1",
        "hunter2",
        "a8f3k2m9x7q1w5e4r6t0",
    ]
