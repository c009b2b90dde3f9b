"""The command executor on real subprocesses, through the harness."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import Failure, Transition
from plugins.command.executor import CommandExecutor
from plugins.registry import load_executor
from plugins.testing import ExecutorHarness
from tests.docs.blocks import find
from tracker_client.errors import ExecutorError

from .helpers import PY, kill_leftovers, pid_alive, wait_dead

pytestmark = pytest.mark.anyio

ECHO_ARGS = "import json, sys; print(json.dumps(sys.argv[1:]))"


def command(script: str, *args: str, **options: Any) -> CommandExecutor:
    return CommandExecutor({"argv": [PY, "-c", script, *args], **options})


def exit_event(harness: ExecutorHarness) -> dict[str, Any]:
    (event,) = harness.events_of("exit")
    assert isinstance(event, dict)
    return event


async def test_placeholders_render_into_single_arguments(tmp_path: Path) -> None:
    harness = ExecutorHarness(
        title="it's $(rm -rf /) `x` ; y",
        metadata={"ticket": "T-1", "n": 3, "flag": True, "obj": {"b": 1, "a": [2]}},
        instructions="do it",
        attempt=2,
        workdir=tmp_path,
    )
    executor = command(
        ECHO_ARGS,
        "{task.id}",
        "{task.title}",
        "--ticket={task.metadata[ticket]}",
        "{task.metadata[n]}",
        "{task.metadata[flag]}",
        "{task.metadata[obj]}",
        "{run.id}",
        "{attempt}",
        "{workdir}",
        "{task_file}",
        "{instructions}",
        "{{literal}}",
    )
    outcome = await harness.run(executor)
    assert outcome == Transition(trigger=None)
    args = json.loads(exit_event(harness)["stdout_tail"])
    assert args == [
        harness.task.id,
        "it's $(rm -rf /) `x` ; y",
        "--ticket=T-1",
        "3",
        "true",
        '{"a": [2], "b": 1}',
        harness.run_model.id,
        "2",
        str(tmp_path),
        str(tmp_path / "task.json"),
        "do it",
        "{literal}",
    ]


@pytest.mark.parametrize(
    ("argv_item", "message"),
    [
        ("{task.secret}", r"'argv\[3\]': unknown placeholder \{task.secret\}"),
        ("{task.__class__}", r"unknown placeholder \{task.__class__\}"),
        ("{0}", r"unknown placeholder \{0\}"),
        ("{attempt:03d}", r"\{attempt\} may not use a conversion or format spec"),
        ("{task.title!r}", r"may not use a conversion"),
        ("{task.id", r"bad template"),
        ("}", r"bad template"),
    ],
)
def test_bad_placeholder_is_named_at_construction(argv_item: str, message: str) -> None:
    with pytest.raises(ExecutorError, match=message):
        command("pass", argv_item)


def test_task_file_placeholder_needs_task_file() -> None:
    with pytest.raises(ExecutorError, match=r"'argv\[3\]' uses \{task_file\}"):
        command("pass", "{task_file}", task_file=False)


async def test_missing_metadata_key_fails_without_retry(tmp_path: Path) -> None:
    harness = ExecutorHarness(metadata={"other": 1}, workdir=tmp_path)
    outcome = await harness.run(command("pass", "{task.metadata[ticket]}"))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "bad_task_input"
    assert not outcome.retryable
    assert "no metadata key 'ticket'" in outcome.message
    assert "argv[3]" in outcome.message


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, r"'argv' must be a non-empty list"),
        ({"argv": []}, r"'argv' must be a non-empty list"),
        ({"argv": "ls -l"}, r"'argv' must be a non-empty list"),
        ({"argv": ["ls", 3]}, r"'argv' must be a non-empty list"),
        ({"argv": [""]}, r"argv\[0\]\) is empty"),
        ({"argv": ["ls"], "argvv": []}, r"unknown command option\(s\) 'argvv'"),
        ({"argv": ["ls"], "env": {"A": 1}}, r"'env' must be a table of strings"),
        ({"argv": ["ls"], "env_passthrough": "HOME"}, r"'env_passthrough' must be a list"),
        ({"argv": ["ls"], "stdin": "file"}, r"'stdin' must be 'none' or 'task_json'"),
        ({"argv": ["ls"], "task_file": "yes"}, r"'task_file' must be true or false"),
        ({"argv": ["ls"], "exit_codes": {}}, r"'exit_codes' must be a non-empty table"),
        ({"argv": ["ls"], "exit_codes": {"ok": "complete"}}, r"'ok' is not an exit code"),
        ({"argv": ["ls"], "exit_codes": {"300": "complete"}}, r"'300' is not an exit code"),
        ({"argv": ["ls"], "exit_codes": {"0": 1}}, r"the trigger of '0' must be a string"),
        ({"argv": ["ls"], "retryable_exit_codes": 75}, r"'retryable_exit_codes' must be a list"),
        ({"argv": ["ls"], "retryable_exit_codes": [-1]}, r"-1 is not an exit code"),
        ({"argv": ["ls"], "timeout_s": -1}, r"'timeout_s' must be a positive number"),
        ({"argv": ["ls"], "term_grace_s": "5"}, r"'term_grace_s' must be a positive number"),
        ({"argv": ["ls"], "tail_bytes": True}, r"'tail_bytes' must be an integer"),
        ({"argv": ["ls"], "env": {"A": "{nope}"}}, r"'env.A': unknown placeholder"),
    ],
)
def test_bad_options_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ExecutorError, match=message):
        CommandExecutor(options)


def test_registry_builds_command_and_prefixes_errors() -> None:
    assert isinstance(load_executor("command", {"argv": ["true"]}), CommandExecutor)
    with pytest.raises(ExecutorError, match=r"^executor 'command': unknown command option"):
        load_executor("command", {"argv": ["true"], "bogus": 1})


async def test_child_env_has_run_vars_and_no_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "tok-secret-1")
    monkeypatch.setenv("NULLTICKETS_API_TOKEN", "tok-secret-2")
    monkeypatch.setenv("MY_SETTING", "visible")
    monkeypatch.setenv("NOT_ALLOWED", "hidden")
    harness = ExecutorHarness(metadata={"t": "T-9"}, attempt=4, workdir=tmp_path)
    executor = command(
        "import json, os; print(json.dumps(dict(os.environ)))",
        env={"MODE": "ci", "TICKET": "{task.metadata[t]}", "X_API_TOKEN": "tok-secret-3"},
        env_passthrough=["MY_SETTING", "BACKLOG_WORKER_API_TOKEN", "NULLTICKETS_*"],
    )
    await harness.run(executor)
    stdout = exit_event(harness)["stdout_tail"]
    assert "tok-secret" not in stdout
    env = json.loads(stdout)
    assert env["BACKLOG_TASK_ID"] == harness.task.id
    assert env["BACKLOG_RUN_ID"] == harness.run_model.id
    assert env["BACKLOG_ATTEMPT"] == "4"
    assert env["BACKLOG_WORKDIR"] == str(tmp_path)
    assert env["BACKLOG_TASK_FILE"] == str(tmp_path / "task.json")
    assert env["MODE"] == "ci"
    assert env["TICKET"] == "T-9"
    assert env["MY_SETTING"] == "visible"
    assert "NOT_ALLOWED" not in env
    assert "HOME" not in env


async def test_task_json_on_stdin_and_in_file(tmp_path: Path) -> None:
    harness = ExecutorHarness(title="json me", metadata={"k": "v"}, workdir=tmp_path)
    script = (
        "import json, os, sys\n"
        "piped = json.load(sys.stdin)\n"
        "filed = json.load(open(os.environ['BACKLOG_TASK_FILE']))\n"
        "assert piped == filed\n"
        "print(piped['task']['title'], piped['task']['metadata']['k'], piped['attempt'])\n"
    )
    outcome = await harness.run(command(script, stdin="task_json"))
    assert outcome == Transition()
    assert exit_event(harness)["stdout_tail"] == "json me v 1\n"
    doc = json.loads((tmp_path / "task.json").read_text())
    assert doc["run"]["id"] == harness.run_model.id
    assert "lease" not in json.dumps(doc)


async def test_no_task_file_and_devnull_stdin(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    script = "import os, sys; print(repr(sys.stdin.read()), 'BACKLOG_TASK_FILE' in os.environ)"
    await harness.run(command(script, task_file=False))
    assert exit_event(harness)["stdout_tail"] == "'' False\n"
    assert not (tmp_path / "task.json").exists()


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (0, Transition(trigger="complete")),
        (3, Transition(trigger="reject")),
        (4, Transition(trigger=None)),
    ],
)
async def test_exit_code_map(tmp_path: Path, code: int, expected: Transition) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    executor = command(
        f"import sys; sys.exit({code})", exit_codes={"0": "complete", 3: "reject", "4": ""}
    )
    assert await harness.run(executor) == expected


async def test_unmapped_exit_code_fails_with_stderr_tail(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    script = (
        "import sys; print('x' * 10000, file=sys.stderr); "
        "print('disk full', file=sys.stderr); sys.exit(5)"
    )
    outcome = await harness.run(command(script, exit_codes={"0": "complete"}, tail_bytes=100))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "exit_code"
    assert outcome.retryable
    assert "exited with status 5" in outcome.message
    assert "disk full" in outcome.message
    assert outcome.details["returncode"] == 5
    assert outcome.details["signal"] is None
    assert outcome.details["stderr_tail"].endswith("disk full\n")
    assert len(outcome.details["stderr_tail"]) <= 100
    assert outcome.details["stderr_bytes"] == 10011


@pytest.mark.parametrize(("code", "retryable"), [(75, True), (5, False)])
async def test_retryable_exit_codes(tmp_path: Path, code: int, retryable: bool) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    executor = command(f"import sys; sys.exit({code})", retryable_exit_codes=[75])
    outcome = await harness.run(executor)
    assert isinstance(outcome, Failure)
    assert outcome.retryable is retryable


async def test_killed_by_signal_is_a_failure(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    outcome = await harness.run(command("import os; os.kill(os.getpid(), 9)"))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "killed"
    assert outcome.details["signal"] == 9
    assert "signal 9" in outcome.message


STUBBORN = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    print(os.getpid(), flush=True)
    while True:
        time.sleep(1)
print(os.getpid(), flush=True)
print("working hard", file=sys.stderr, flush=True)
while True:
    time.sleep(1)
"""


def pids_from(harness: ExecutorHarness) -> list[int]:
    text = "".join(d["text"] for d in harness.events_of("output") if d["stream"] == "stdout")
    return [int(x) for x in text.split()]


async def test_timeout_kills_group_and_fails_with_tails(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    executor = command(STUBBORN, timeout_s=1.0, term_grace_s=0.2)
    try:
        with anyio.fail_after(20):
            outcome = await harness.run(executor)
        assert isinstance(outcome, Failure)
        assert outcome.reason == "timeout"
        assert outcome.retryable
        assert "within 1s" in outcome.message
        assert "working hard" in outcome.details["stderr_tail"]
        assert exit_event(harness)["timed_out"] is True
        pids = pids_from(harness)
        assert len(pids) == 2
        assert await wait_dead(pids, 0.5) == []
    finally:
        kill_leftovers(pids_from(harness))


async def test_cancel_kills_group(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    executor = command(STUBBORN, term_grace_s=0.2)

    async def cancel_when_both_printed() -> None:
        with anyio.fail_after(20):
            while len(pids_from(harness)) < 2:
                await harness.sink.wait_changed()
        harness.cancel()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_when_both_printed)
            outcome = await harness.run(executor)
        assert harness.cancelled
        assert isinstance(outcome, Failure)
        assert outcome.reason == "cancelled"
        assert [p for p in pids_from(harness) if pid_alive(p)] == []
    finally:
        kill_leftovers(pids_from(harness))


async def test_output_streams_as_events_decoded_and_limited(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    script = (
        "import sys\n"
        "sys.stdout.buffer.write(b'caf\\xc3\\xa9 \\xff\\n'); sys.stdout.flush()\n"
        "sys.stderr.write('e' * 5000)\n"
    )
    await harness.run(command(script, stream_limit_bytes=1000))
    out = [d for d in harness.events_of("output") if d["stream"] == "stdout"]
    err = [d for d in harness.events_of("output") if d["stream"] == "stderr"]
    assert "".join(d["text"] for d in out) == "café \ufffd\n"
    assert sum(len(d["text"]) for d in err) == 1000
    assert "stream limit reached" in err[-1]["note"]
    assert exit_event(harness)["stderr_bytes"] == 5000


async def test_stream_output_off(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    await harness.run(command("print('quiet')", stream_output=False))
    assert harness.events_of("output") == []
    assert exit_event(harness)["stdout_tail"] == "quiet\n"


OUTCOME_PATH = "os.path.join(os.environ['BACKLOG_WORKDIR'], 'outcome.json')"


def write_outcome(content: str) -> str:
    """A script writing ``content`` to outcome.json (braces doubled: argv items are templates)."""
    script = f"import os; open({OUTCOME_PATH}, 'w').write({content!r})"
    return script.replace("{", "{{").replace("}", "}}")


async def test_outcome_file_overrides_trigger(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    doc = {"trigger": "approve", "instructions": "ship it", "usage": {"tokens": 5}}
    outcome = await harness.run(
        command(write_outcome(json.dumps(doc)), exit_codes={"0": "complete"})
    )
    assert outcome == Transition(trigger="approve", instructions="ship it", usage={"tokens": 5})


async def test_outcome_file_without_trigger_keeps_mapped_one(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    outcome = await harness.run(
        command(write_outcome('{"instructions": "n"}'), exit_codes={"0": "complete"})
    )
    assert outcome == Transition(trigger="complete", instructions="n")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "outcome.json is not valid JSON"),
        ("[1, 2]", "must hold a JSON object, got list"),
        ('{"trigger": 3}', "'trigger' must be a non-empty string, got 3"),
        ('{"trigger": "  "}', "'trigger' must be a non-empty string"),
        ('{"instructions": 1}', "'instructions' must be a string"),
        ('{"trigerr": "approve"}', "unknown key(s) 'trigerr'"),
        ("\udcff", "not valid JSON"),
    ],
)
async def test_bad_outcome_file_fails_naming_the_problem(
    tmp_path: Path, content: str, problem: str
) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    if content == "\udcff":
        script = f"import os; open({OUTCOME_PATH}, 'wb').write(b'\\xff\\xfe')"
    else:
        script = write_outcome(content)
    outcome = await harness.run(command(script))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "bad_executor_output"
    assert not outcome.retryable
    assert problem in outcome.message


async def test_outcome_file_result_is_the_tasks_result(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    doc = find("docs/executors/command.md", lang="json", after="## A result from a command").body
    outcome = await harness.run(command(write_outcome(doc)))
    assert outcome == Transition(trigger="approve")
    assert harness.events_of("result") == [{"score": 0.9, "notes": ["ok"]}]


async def test_outcome_file_big_result_is_a_file_under_artifacts_dir(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path / "run")
    value = {"rows": ["y" * 1000] * 70}  # over the 64 KiB inline cap
    out = tmp_path / "kept"
    outcome = await harness.run(
        command(write_outcome(json.dumps({"result": value})), artifacts_dir=str(out))
    )
    assert isinstance(outcome, Transition) and outcome.trigger is None  # exit 0's default
    path = out / harness.task.id / harness.run_model.id / "result.json"
    assert json.loads(path.read_bytes()) == value
    (artifact,) = harness.artifacts
    assert (artifact.kind, artifact.uri, artifact.size_bytes) == (
        "result", path.as_uri(), path.stat().st_size
    )  # fmt: skip
    (pointer,) = harness.events_of("result")
    assert pointer == {
        "artifact_id": "artifact-1",
        "uri": path.as_uri(),
        "size_bytes": path.stat().st_size,
        "sha256": artifact.sha256,
    }


async def test_outcome_file_result_problems_are_named(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path / "run")
    outcome = await harness.run(command(write_outcome('{"result": [1, NaN]}')))
    assert isinstance(outcome, Failure)
    assert (outcome.reason, outcome.retryable) == ("bad_executor_output", False)
    assert outcome.message.endswith(
        "outcome.json returned a result that is not JSON: the result[1] is the float nan, not JSON"
    )
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the artifacts directory should be")
    big = json.dumps({"result": "z" * 70_000})
    outcome = await harness.run(command(write_outcome(big), artifacts_dir=str(blocker)))
    assert isinstance(outcome, Failure)
    assert (outcome.reason, outcome.retryable) == ("artifact_failed", True)
    assert "a 70002-byte result (over 65536 bytes, so kept as a file) could not be written to " in (
        outcome.message
    )
    assert harness.events_of("result") == [] and harness.artifacts == []
    assert "returncode" in outcome.details  # the exit's details, as for any outcome.json problem


async def test_outcome_file_ignored_when_exit_code_fails(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    script = write_outcome('{"trigger": "approve"}') + "; raise SystemExit(2)"
    outcome = await harness.run(command(script))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "exit_code"


async def test_missing_binary_fails_run(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    outcome = await harness.run(CommandExecutor({"argv": ["no-such-binary-xyz", "a"]}))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "spawn_failed"
    assert outcome.retryable
    assert "no-such-binary-xyz" in outcome.message


async def test_too_large_argument_fails_without_retry(tmp_path: Path) -> None:
    harness = ExecutorHarness(metadata={"blob": "x" * 300_000}, workdir=tmp_path)
    outcome = await harness.run(command("pass", "{task.metadata[blob]}"))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "spawn_failed"
    assert not outcome.retryable
    assert "argument list too large" in outcome.message


async def test_relative_program_is_the_workers_not_the_workdirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\necho tool ran in "$PWD"\n')
    tool.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    executor = CommandExecutor({"argv": [os.path.join("bin", "tool")]})
    assert await executor.readiness() == []
    workdir = tmp_path / "work"
    harness = ExecutorHarness(workdir=workdir)
    assert await harness.run(executor) == Transition()
    assert exit_event(harness)["stdout_tail"] == f"tool ran in {workdir}\n"


async def test_readiness(tmp_path: Path) -> None:
    assert await CommandExecutor({"argv": [PY]}).readiness() == []
    assert await CommandExecutor({"argv": ["{task.metadata[tool]}"]}).readiness() == []
    problems = await CommandExecutor({"argv": ["no-such-binary-xyz"]}).readiness()
    assert len(problems) == 1
    assert "'no-such-binary-xyz' was not found on PATH" in problems[0]
    plain = tmp_path / "plain"
    plain.write_text("")
    plain.chmod(stat.S_IRUSR)
    problems = await CommandExecutor({"argv": [str(plain)]}).readiness()
    assert problems == [f"command {str(plain)!r} is not an executable file"]


async def test_cwd_option_relative_and_templated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "repos" / "web").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "solve.py").write_text("import os; print(os.getcwd())\n")
    monkeypatch.chdir(tmp_path)
    workdir = tmp_path / "work"
    # a relative script path works when cwd is the worker's directory
    executor = CommandExecutor({"argv": [PY, "scripts/solve.py"], "cwd": "."})
    assert await executor.readiness() == []
    harness = ExecutorHarness(workdir=workdir)
    assert await harness.run(executor) == Transition()
    assert exit_event(harness)["stdout_tail"] == f"{tmp_path}\n"
    # templated: resolved per task, relative to the worker's directory
    executor = command("import os; print(os.getcwd())", cwd="repos/{task.metadata[repo]}")
    harness = ExecutorHarness(metadata={"repo": "web"}, workdir=workdir)
    assert await harness.run(executor) == Transition()
    assert exit_event(harness)["stdout_tail"] == f"{tmp_path / 'repos' / 'web'}\n"
    harness = ExecutorHarness(metadata={"repo": "absent"}, workdir=workdir)
    outcome = await harness.run(executor)
    assert isinstance(outcome, Failure)
    assert outcome.reason == "spawn_failed"
    assert "absent is missing" in outcome.message


async def test_cwd_option_checked(tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match=r"'cwd' must be a non-empty path string"):
        CommandExecutor({"argv": [PY], "cwd": ""})
    with pytest.raises(ExecutorError, match=r"'cwd': unknown placeholder \{nope\}"):
        CommandExecutor({"argv": [PY], "cwd": "{nope}"})
    problems = await CommandExecutor({"argv": [PY], "cwd": str(tmp_path / "gone")}).readiness()
    assert problems == [f"command option 'cwd': {tmp_path / 'gone'} is not a directory"]
