"""The fake binary reproduces the CLI's outcomes and children; :func:`classify` reads each row.

Rows the executor can never produce (it always sets HOME and always passes ``-m <value>``) are
driven here directly, so the result rules are still checked against them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from plugins.api import Failure
from plugins.nullclaw.result import Answer, classify, find_verdict, split_answer
from tests.plugins.helpers import pid_alive

RETRYABLE = ("RateLimited", "AllProvidersFailed", "CurlFailed")


def _home(tmp_path: Path, config: str | None = None) -> Path:
    home = tmp_path / "home"
    (home / ".nullclaw").mkdir(parents=True, exist_ok=True)
    cfg = config or '{"agents": {"defaults": {"model": {"primary": "fakellm/m"}}}}'
    (home / ".nullclaw" / "config.json").write_text(cfg)
    return home


def run_fake(
    fake_bin: Path, args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    base = {"PATH": os.environ["PATH"], **env}
    return subprocess.run(
        [str(fake_bin), *args], env=base, stdin=subprocess.DEVNULL, capture_output=True, timeout=30
    )


def outcome_of(proc: subprocess.CompletedProcess[bytes]) -> Failure | Answer:
    rc = proc.returncode
    return classify(
        returncode=rc,
        signum=-rc if rc < 0 else None,
        stdout=proc.stdout,
        stderr=proc.stderr,
        retryable_errors=RETRYABLE,
    )


@pytest.mark.parametrize(
    ("args", "home", "needle"),
    [
        (["agent", "-m", "hi"], False, "No config found"),
        (["agent", "-m"], True, "Missing value for -m"),
        (["agent", "--temperature", "hot", "-m", "hi"], True, "Invalid --temperature value: hot"),
        (["agent", "--temperature", "5", "-m", "hi"], True, "temperature must be between"),
    ],
)
def test_rc0_config_rows(
    tmp_path: Path, fake_bin: Path, args: list[str], home: bool, needle: str
) -> None:
    env = {"HOME": str(_home(tmp_path))} if home else {}
    proc = run_fake(fake_bin, args, env)
    assert proc.returncode == 0
    assert proc.stdout == b""
    out = outcome_of(proc)
    assert isinstance(out, Failure)
    assert out.reason == "nullclaw_config_error"
    assert not out.retryable
    assert needle in out.message


def test_unknown_command_is_rc1_without_error_name(tmp_path: Path, fake_bin: Path) -> None:
    proc = run_fake(fake_bin, ["frobnicate"], {"HOME": str(_home(tmp_path))})
    assert proc.returncode == 1
    out = outcome_of(proc)
    assert isinstance(out, Failure)
    assert out.reason == "nullclaw_error"
    assert not out.retryable
    assert "Usage" in out.message or "Unknown command" in str(out.details)


def test_unknown_flags_are_ignored_and_session_line_is_stripped(
    tmp_path: Path, fake_bin: Path
) -> None:
    proc = run_fake(
        fake_bin,
        ["agent", "--bogus", "-s", "abc", "-m", "hello"],
        {"HOME": str(_home(tmp_path)), "FAKE_NULLCLAW_ANSWER": "fine"},
    )
    assert proc.stdout == b"Sending to fakellm...\nSession: abc\nfine\n"
    out = outcome_of(proc)
    assert isinstance(out, Answer)
    assert out.text == "fine"
    assert out.header == ["Sending to fakellm...", "Session: abc"]


def test_slash_prompt_and_repl_are_not_answers(tmp_path: Path, fake_bin: Path) -> None:
    env = {"HOME": str(_home(tmp_path))}
    slash = outcome_of(run_fake(fake_bin, ["agent", "-m", "/help"], env))
    assert isinstance(slash, Failure)
    assert slash.reason == "nullclaw_unexpected_output"
    assert "Available commands" in slash.message
    repl = outcome_of(run_fake(fake_bin, ["agent"], env))  # forgot -m, stdin /dev/null
    assert isinstance(repl, Failure)
    assert repl.reason == "nullclaw_unexpected_output"


def test_version(fake_bin: Path) -> None:
    for arg in ("version", "--version", "-V"):
        proc = run_fake(fake_bin, [arg], {})
        assert (proc.returncode, proc.stdout) == (0, b"nullclaw 2026.2.26\n")


def test_streaming_mode_prints_progressively_through_a_pipe(tmp_path: Path, fake_bin: Path) -> None:
    home = _home(
        tmp_path,
        '{"agents": {"defaults": {"model": {"primary": "fakellm/m"}}}, '
        '"reliability": {"provider_retries": 0}}',
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "FAKE_NULLCLAW_ANSWER": "abcdefgh" * 4,
        "FAKE_NULLCLAW_DELAY": "0.3",
    }
    with subprocess.Popen(
        [str(fake_bin), "agent", "-m", "x"], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        first = proc.stdout.readline()
        chunk = proc.stdout.read1(100)  # type: ignore[attr-defined]
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
    assert first == b"Sending to fakellm...\n"
    # the first deltas arrived before the last ones were written
    assert 0 < len(chunk) < 32
    assert chunk + rest == b"abcdefgh" * 4 + b"\n"


def test_children_outlive_a_sigterm_to_nullclaw_alone(tmp_path: Path, fake_bin: Path) -> None:
    """As the real ones, the fake's curl and shell children survive the parent's death; this is what
    makes the executor's no-orphan tests meaningful."""
    pidfile = tmp_path / "pids"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(_home(tmp_path)),
        "FAKE_NULLCLAW_MODE": "hang",
        "FAKE_NULLCLAW_PIDFILE": str(pidfile),
    }
    proc = subprocess.Popen(
        [str(fake_bin), "agent", "-m", "x"], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not pidfile.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        pids: dict[str, Any] = {
            r: int(p) for r, p in (ln.split() for ln in pidfile.read_text().splitlines())
        }
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert pid_alive(pids["curl"])
        assert pid_alive(pids["shell"])
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("stdout", "text"),
    [
        (b"Sending to x...\nhello\n", "hello"),
        (b"Sending to x...\nhello\n\n", "hello\n"),
        (b"Sending to x...\n", ""),
        (b"Sending to x...", ""),
        (b"Sending to x...\r\nline1\nline2", "line1\nline2"),
    ],
)
def test_split_answer(stdout: bytes, text: str) -> None:
    assert split_answer(stdout).text == text


def test_classify_unknown_signal_and_error_names() -> None:
    out = classify(returncode=-64, signum=64, stdout=b"", stderr=b"", retryable_errors=())
    assert isinstance(out, Failure)
    assert out.reason == "nullclaw_killed"
    assert "SIGRTMAX" in out.message or "signal 64" in out.message
    out = classify(
        returncode=1,
        signum=None,
        stdout=b"Sending to x...\n",
        stderr=b"error: FileNotFound\nerror: OutOfMemory\n",
        retryable_errors=RETRYABLE,
    )
    assert isinstance(out, Failure)
    assert out.details["error"] == "OutOfMemory"  # the final one
    assert not out.retryable
    out = classify(returncode=3, signum=None, stdout=b"", stderr=b"", retryable_errors=())
    assert isinstance(out, Failure)
    assert "(stderr was empty)" in out.message


def test_find_verdict() -> None:
    triggers = {"APPROVE": "approve", "REJECT": "reject"}
    assert find_verdict("x\nREJECT\n\nApprove!\n", triggers) == ("APPROVE", "approve")
    assert find_verdict("I would not approve this", triggers) is None
    assert find_verdict("> Decision = **reject**", triggers) == ("REJECT", "reject")
