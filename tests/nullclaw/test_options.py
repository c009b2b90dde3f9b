"""Options validation, config generation and workspace policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plugins.api import Transition
from plugins.nullclaw.executor import NullClawExecutor
from plugins.nullclaw.home import RunPlaces, build_config, child_env, config_bytes, workspace_for
from plugins.nullclaw.options import parse_options
from tracker_client.errors import ExecutorError

from .conftest import RecordingSink, make_ctx, read_record

GEN = {"provider": "fakellm", "model": "m"}


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({**GEN, "modle": "x"}, "unknown option 'modle'"),
        ({"provider": "fakellm"}, "set 'provider' and 'model'"),
        ({**GEN, "temperature": 5}, "option 'temperature'"),
        ({**GEN, "temperature": "hot"}, "option 'temperature'"),
        ({**GEN, "timeout_s": 0}, "option 'timeout_s'"),
        ({**GEN, "workspace": "per-task"}, "option 'workspace'"),
        ({**GEN, "workspace": "task"}, "needs 'workspace_dir'"),
        ({**GEN, "workspace": "shared", "workspace_dir": "rel/dir"}, "absolute path"),
        ({"home": "relative/home"}, "'home' must be an absolute path"),
        (
            {"home": "/h", "base_url": "http://127.0.0.1:1", "config": {"a": 1}},
            "'base_url', 'config' only shape a generated config",
        ),
        ({**GEN, "provider": "a/b"}, "must not contain '/'"),
        ({**GEN, "provider": "openai", "base_url": "http://127.0.0.1:1"}, "ignores 'base_url'"),
        ({**GEN, "env_passthrough": ["BACKLOG_WORKER_API_TOKEN"]}, "never passed to nullclaw"),
        ({**GEN, "env_passthrough": ["NULLTICKETS_TOKEN"]}, "never passed to nullclaw"),
        ({**GEN, "env_passthrough": ["MY_TRACKER_KEY"]}, "never passed to nullclaw"),
        ({**GEN, "env_passthrough": ["*"]}, "would also pass the worker's own settings"),
        ({**GEN, "env_passthrough": ["BACKLOG_*"]}, "would also pass the worker's own settings"),
        ({**GEN, "env_passthrough": ["HOME"]}, "set by the executor itself"),
        ({**GEN, "env_passthrough": ["bad name"]}, "is not valid"),
        ({**GEN, "api_key_env": "BACKLOG_WORKER_API_TOKEN"}, "never passed to nullclaw"),
        ({**GEN, "prompt_template": "a", "prompt_template_file": "/x"}, "only one of"),
        ({**GEN, "prompt_template": "Hi $who"}, "unknown placeholder(s) $who"),
        ({**GEN, "verdict_fallback_trigger": "approve"}, "needs 'triggers'"),
        ({**GEN, "max_prompt_arg_bytes": 200_000}, "option 'max_prompt_arg_bytes'"),
        ({**GEN, "oversized_prompt": "truncate"}, "option 'oversized_prompt'"),
    ],
)
def test_bad_options_name_the_problem(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ExecutorError, match="nullclaw executor") as info:
        NullClawExecutor(options)
    assert needle in str(info.value)


def test_unreadable_template_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(ExecutorError, match="prompt_template_file") as info:
        NullClawExecutor({**GEN, "prompt_template_file": str(missing)})
    assert str(missing) in str(info.value)


def test_template_file_is_used(tmp_path: Path) -> None:
    path = tmp_path / "tpl.txt"
    path.write_text("Do: $title\n")
    ex = NullClawExecutor({**GEN, "prompt_template_file": str(path)})
    assert ex._template == "Do: $title\n"


def test_relative_binary_path_is_pinned_to_the_worker_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert NullClawExecutor({**GEN, "binary": "bin/nullclaw"}).options.binary == str(
        tmp_path / "bin" / "nullclaw"
    )
    assert NullClawExecutor(GEN).options.binary == "nullclaw"  # a bare name uses PATH


def test_generated_config_contents() -> None:
    opts = parse_options(
        {
            **GEN,
            "base_url": "http://127.0.0.1:1/v1",
            "provider_retries": 0,
            "provider_backoff_ms": 100,
            "message_timeout_s": 30,
            "temperature": 0.3,
            "config": {"autonomy": {"level": "read_only"}, "memory": {"auto_save": True}},
        }
    )
    assert build_config(opts) == {
        "models": {"providers": {"fakellm": {"base_url": "http://127.0.0.1:1/v1"}}},
        "agents": {"defaults": {"model": {"primary": "fakellm/m"}}},
        "memory": {"backend": "none", "auto_save": True},
        "reliability": {"provider_retries": 0, "provider_backoff_ms": 100},
        "agent": {"message_timeout_secs": 30},
        "default_temperature": 0.3,
        "autonomy": {"level": "read_only"},
    }
    assert json.loads(config_bytes(opts))["agents"]["defaults"]["model"]["primary"] == "fakellm/m"


def test_oversized_generated_config_is_refused() -> None:
    opts = parse_options({**GEN, "config": {"junk": "x" * 70_000}})
    with pytest.raises(ValueError, match="at most 65536"):
        config_bytes(opts)


def test_workspace_policies(tmp_path: Path) -> None:
    run = parse_options(GEN)
    assert workspace_for(run, workdir=tmp_path, task_id="t") == tmp_path / "workspace"
    task = parse_options({**GEN, "workspace": "task", "workspace_dir": str(tmp_path / "ws")})
    assert workspace_for(task, workdir=tmp_path, task_id="abc-1") == tmp_path / "ws" / "abc-1"
    odd = workspace_for(task, workdir=tmp_path, task_id="../../etc")
    assert odd.parent == tmp_path / "ws"
    assert odd.name.startswith("task-")
    shared = parse_options({**GEN, "workspace": "shared", "workspace_dir": str(tmp_path / "s")})
    assert workspace_for(shared, workdir=tmp_path, task_id="t") == tmp_path / "s"


def test_child_env_is_built_from_scratch(tmp_path: Path) -> None:
    opts = parse_options(
        {**GEN, "env_passthrough": ["OPENROUTER_API_KEY", "LC_*"], "api_key_env": "K"}
    )
    places = RunPlaces(home=tmp_path / "h", workspace=tmp_path / "w", generated=True)
    environ = {
        "PATH": "/usr/bin",
        "OPENROUTER_API_KEY": "or",
        "LC_TIME": "C",
        "K": "key",
        "BACKLOG_WORKER_API_TOKEN": "secret",
        "HOME": "/root",
        "UNLISTED": "x",
    }
    env = child_env(opts, places, environ=environ)
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "OPENROUTER_API_KEY": "or",
        "LC_TIME": "C",
        "HOME": str(tmp_path / "h"),
        "NULLCLAW_WORKSPACE": str(tmp_path / "w"),
        "NULLCLAW_API_KEY": "key",
    }
    with pytest.raises(KeyError):
        child_env(opts, places, environ={"PATH": "/usr/bin"})


@pytest.mark.anyio
async def test_task_workspace_is_kept_across_runs_and_shared_is_one_dir(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    opts = {**options, "workspace": "task", "workspace_dir": str(tmp_path / "tasks")}
    ex = NullClawExecutor(opts)
    assert isinstance(await ex.execute(make_ctx(tmp_path / "r1", sink, run_id="r1")), Transition)
    assert isinstance(await ex.execute(make_ctx(tmp_path / "r2", sink, run_id="r2")), Transition)
    ws = tmp_path / "tasks" / "task-1"
    assert read_record(record)["cwd"] == str(ws)
    assert sorted(p.name for p in (ws / ".backlog-worker").iterdir()) == [
        "answer-r1.md",
        "answer-r2.md",
    ]
    shared = {**options, "workspace": "shared", "workspace_dir": str(tmp_path / "shared")}
    ctx = make_ctx(tmp_path / "r3", sink, run_id="r3", id="other-task")
    assert isinstance(await NullClawExecutor(shared).execute(ctx), Transition)
    assert read_record(record)["env"]["NULLCLAW_WORKSPACE"] == str(tmp_path / "shared")
    # the private HOME is never inside the workspace the agent's file tools can see
    assert not (tmp_path / "shared" / "nullclaw-home").exists()


@pytest.mark.anyio
async def test_answers_dir_keeps_answers_outside_the_run_workdir(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink
) -> None:
    opts = {**options, "answers_dir": str(tmp_path / "answers")}
    ctx = make_ctx(tmp_path / "run", sink, id="../evil")
    assert isinstance(await NullClawExecutor(opts).execute(ctx), Transition)
    [art] = sink.artifacts
    path = Path(art.uri.removeprefix("file://"))
    assert path.parent.parent == tmp_path / "answers"
    assert path.parent.name == "_._evil"
    assert path.read_text().startswith("Answer: ")


def test_answers_dir_must_be_absolute() -> None:
    with pytest.raises(ExecutorError, match="'answers_dir' must be an absolute path"):
        NullClawExecutor({**GEN, "answers_dir": "answers"})
