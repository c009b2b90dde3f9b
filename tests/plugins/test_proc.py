"""plugins.proc.process on real subprocesses: group kill, capture caps, spawn errors, env."""

from __future__ import annotations

import os
import re
import signal
import stat
from pathlib import Path

import anyio
import pytest

from plugins.proc.process import (
    SpawnError,
    decode_output,
    is_secret_env_name,
    minimal_env,
    run_process,
)
from tracker_client.errors import ExecutorError

from .helpers import PY, kill_leftovers, pid_alive, wait_dead

pytestmark = pytest.mark.anyio

# A child that ignores SIGTERM and forks a grandchild that ignores it too; both print their pid.
STUBBORN_TREE = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    print(f"grandchild {os.getpid()}", flush=True)
    while True:
        time.sleep(1)
print(f"child {os.getpid()}", flush=True)
while True:
    time.sleep(1)
"""

# The leader starts a daemon-like grandchild (stdio to /dev/null) and exits at once.
LEAVES_GRANDCHILD = r"""
import os, signal, sys, time
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        time.sleep(1)
print(pid, flush=True)
"""

# Same, but the grandchild keeps the stdout pipe open: the run must still end.
LEAVES_GRANDCHILD_HOLDING_PIPE = r"""
import os, sys, time
pid = os.fork()
if pid == 0:
    while True:
        time.sleep(1)
print(pid, flush=True)
"""


def env() -> dict[str, str]:
    return minimal_env()


class PidCollector:
    """on_stdout callback that parses ``name pid`` lines and signals once ``want`` were seen."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.pids: list[int] = []
        self.ready = anyio.Event()
        self._buf = b""

    async def __call__(self, chunk: bytes) -> None:
        self._buf += chunk
        self.pids = [int(m) for m in re.findall(rb"(\d+)\n", self._buf)]
        if len(self.pids) >= self.want:
            self.ready.set()


async def test_runs_and_captures(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
        cwd=tmp_path,
        env=env(),
    )
    assert result.returncode == 3
    assert result.signal is None
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"
    assert not result.stdout_truncated
    assert not result.stderr_truncated
    assert result.pid > 0
    assert not result.ok


async def test_cwd_and_env_are_used(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import os; print(os.getcwd()); print(os.environ['ONLY_ME'])"],
        cwd=tmp_path,
        env={**env(), "ONLY_ME": "yes"},
    )
    assert result.stdout.decode().splitlines() == [str(tmp_path), "yes"]


async def test_cancel_kills_whole_group_including_term_ignoring_grandchild(
    tmp_path: Path,
) -> None:
    collector = PidCollector(want=2)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await run_process(
                        [PY, "-c", STUBBORN_TREE],
                        cwd=tmp_path,
                        env=env(),
                        on_stdout=collector,
                        term_grace_s=0.2,
                    )

                tg.start_soon(run)
                await collector.ready.wait()
                assert all(pid_alive(p) for p in collector.pids)
                tg.cancel_scope.cancel()
        # run_process only returns (cancelled) after the group is gone: no polling needed here
        assert [p for p in collector.pids if pid_alive(p)] == []
    finally:
        kill_leftovers(collector.pids)


async def test_timeout_kills_group_and_propagates(tmp_path: Path) -> None:
    collector = PidCollector(want=2)

    async def run_until_timeout() -> None:
        # The deadline is brought forward once both processes are up: a slow start under load
        # must not make the timeout fire before the grandchild exists.
        with anyio.fail_after(30) as scope:
            async with anyio.create_task_group() as tg:

                async def time_out_once_started() -> None:
                    await collector.ready.wait()
                    scope.deadline = anyio.current_time() + 0.2

                tg.start_soon(time_out_once_started)
                await run_process(
                    [PY, "-c", STUBBORN_TREE],
                    cwd=tmp_path,
                    env=env(),
                    on_stdout=collector,
                    term_grace_s=0.2,
                )

    try:
        with pytest.raises(TimeoutError):
            await run_until_timeout()
        assert len(collector.pids) == 2
        assert await wait_dead(collector.pids) == []
    finally:
        kill_leftovers(collector.pids)


async def test_sigterm_is_enough_for_a_polite_child(tmp_path: Path) -> None:
    collector = PidCollector(want=1)
    script = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n"
    with anyio.move_on_after(20) as scope, anyio.CancelScope() as inner:

        async def cancel_when_ready() -> None:
            await collector.ready.wait()
            inner.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_when_ready)
            # term_grace_s is long: finishing fast proves SIGTERM alone ended it
            await run_process(
                [PY, "-c", script], cwd=tmp_path, env=env(), on_stdout=collector, term_grace_s=30
            )
    assert not scope.cancelled_caught
    assert not pid_alive(collector.pids[0])


async def test_grandchild_outliving_leader_is_killed(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", LEAVES_GRANDCHILD], cwd=tmp_path, env=env(), term_grace_s=0.2
    )
    grandchild = int(result.stdout)
    try:
        assert result.returncode == 0
        assert not pid_alive(grandchild)
    finally:
        kill_leftovers([grandchild])


async def test_grandchild_holding_the_pipe_does_not_hang_the_run(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        result = await run_process(
            [PY, "-c", LEAVES_GRANDCHILD_HOLDING_PIPE], cwd=tmp_path, env=env(), term_grace_s=5
        )
    grandchild = int(result.stdout)
    try:
        assert result.returncode == 0
        assert not pid_alive(grandchild)
    finally:
        kill_leftovers([grandchild])


# The grandchild leaves the group (setsid) and keeps the stdout pipe: it escapes the group kill,
# but the run must still end (the pipe is abandoned after the drain timeout).
ESCAPES_GROUP = r"""
import os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    time.sleep(30)
    os._exit(0)
print(pid, flush=True)
"""


async def test_descendant_escaping_the_group_does_not_hang_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("plugins.proc.process._DRAIN_TIMEOUT_S", 0.3)
    with anyio.fail_after(20):
        # it also inherits stdin and never reads it: feeding 4 MiB must not block the run
        result = await run_process(
            [PY, "-c", ESCAPES_GROUP], cwd=tmp_path, env=env(), stdin=b"x" * (4 << 20)
        )
    kill_leftovers([int(result.stdout)])
    assert result.returncode == 0


async def test_killed_by_signal(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        cwd=tmp_path,
        env=env(),
    )
    assert result.signal == signal.SIGKILL
    assert result.returncode == -signal.SIGKILL


async def test_non_utf8_output_is_kept_as_bytes(tmp_path: Path) -> None:
    script = (
        "import sys; sys.stdout.buffer.write(b'ok\\xff\\xfe\\x00'); "
        "sys.stderr.buffer.write(b'\\xc3')"
    )
    result = await run_process([PY, "-c", script], cwd=tmp_path, env=env())
    assert result.stdout == b"ok\xff\xfe\x00"
    assert result.stderr == b"\xc3"
    assert decode_output(result.stdout) == "ok\ufffd\ufffd\x00"


async def test_huge_output_is_capped_head_and_tail(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "sys.stdout.write('H' * 100 + 'x' * 3_000_000 + 'END')\n"
        "sys.stderr.write('start' + 'y' * 3_000_000 + 'TAIL')\n"
    )
    seen: list[int] = []

    async def count(chunk: bytes) -> None:
        seen.append(len(chunk))

    result = await run_process(
        [PY, "-c", script], cwd=tmp_path, env=env(), max_capture_bytes=1000, on_stdout=count
    )
    assert result.returncode == 0
    assert result.stdout_truncated
    assert result.stderr_truncated
    assert result.stdout.startswith(b"H" * 100 + b"x" * 900)
    assert b"more bytes not captured" in result.stdout
    assert len(result.stdout) < 1100
    assert result.stderr.endswith(b"y" * 996 + b"TAIL")
    assert b"earlier bytes not captured" in result.stderr
    assert len(result.stderr) < 1100
    # the callback saw everything, in chunks
    assert sum(seen) == 3_000_103


async def test_stdin_fed_and_closed(tmp_path: Path) -> None:
    data = os.urandom(1 << 20)
    result = await run_process(
        [PY, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
        cwd=tmp_path,
        env=env(),
        stdin=data,
        max_capture_bytes=2 << 20,
    )
    assert result.stdout == data


async def test_stdin_is_devnull_by_default(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import sys; print(repr(sys.stdin.read()))"], cwd=tmp_path, env=env()
    )
    assert result.stdout == b"''\n"


async def test_child_ignoring_its_stdin_is_fine(tmp_path: Path) -> None:
    result = await run_process([PY, "-c", "pass"], cwd=tmp_path, env=env(), stdin=b"z" * (4 << 20))
    assert result.returncode == 0


async def test_missing_binary_names_it(tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match=r"no-such-program-xyz.*no such executable"):
        await run_process(["no-such-program-xyz"], cwd=tmp_path, env=env())
    with pytest.raises(ExecutorError, match="no such executable"):
        await run_process([str(tmp_path / "absent")], cwd=tmp_path, env=env())


async def test_not_executable_names_it(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(ExecutorError, match=r"script\.sh.*permission denied"):
        await run_process([str(script)], cwd=tmp_path, env=env())


async def test_missing_cwd_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(ExecutorError, match=r"working directory .*gone is missing"):
        await run_process([PY, "-c", "pass"], cwd=missing, env=env())


async def test_empty_argv(tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match="empty argv"):
        await run_process([], cwd=tmp_path, env=env())


async def test_argument_too_large(tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match="argument list too large") as info:
        await run_process([PY, "-c", "pass", "x" * 300_000], cwd=tmp_path, env=env())
    assert isinstance(info.value, SpawnError)
    assert info.value.reason == "argument_too_large"
    assert info.value.permanent


async def test_nul_byte_in_argument_or_env(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match="argument 2 contains a NUL byte") as info:
        await run_process([PY, "-c", "pass\0"], cwd=tmp_path, env=env())
    assert info.value.permanent
    with pytest.raises(SpawnError, match="null byte"):
        await run_process([PY, "-c", "pass"], cwd=tmp_path, env={**env(), "X": "a\0b"})


async def test_callback_error_ends_process_and_is_raised(tmp_path: Path) -> None:
    collector = PidCollector(want=2)

    async def broken(chunk: bytes) -> None:
        await collector(chunk)
        if collector.ready.is_set():
            raise RuntimeError("sink broke")

    try:
        with anyio.fail_after(20), pytest.raises(RuntimeError, match="sink broke"):
            await run_process(
                [PY, "-c", STUBBORN_TREE],
                cwd=tmp_path,
                env=env(),
                on_stdout=broken,
                term_grace_s=0.1,
            )
        assert [p for p in collector.pids if pid_alive(p)] == []
    finally:
        kill_leftovers(collector.pids)


def test_minimal_env_scrubs_tokens_even_when_allowlisted() -> None:
    base = {
        "PATH": "/bin",
        "LANG": "en_US.UTF-8",
        "HOME": "/home/w",
        "SECRET_THING": "s",
        "BACKLOG_WORKER_API_TOKEN": "t1",
        "BACKLOG_WORKER_TRACKER__TOKEN": "t2",
        "NULLTICKETS_URL": "http://127.0.0.1:1",
        "GITHUB_API_TOKEN": "t3",
        "LC_TIME": "C",
        "LC_CTYPE": "C.UTF-8",
    }
    result = minimal_env(
        ["HOME", "BACKLOG_WORKER_API_TOKEN", "NULLTICKETS_URL", "GITHUB_API_TOKEN", "LC_*"],
        {"X_API_TOKEN": "t4", "KEEP": "1"},
        base=base,
    )
    assert result == {
        "PATH": "/bin",
        "LANG": "en_US.UTF-8",
        "HOME": "/home/w",
        "LC_TIME": "C",
        "LC_CTYPE": "C.UTF-8",
        "KEEP": "1",
    }


def test_minimal_env_defaults_and_no_home_unless_asked() -> None:
    result = minimal_env(base={"HOME": "/root"})
    assert result == {"PATH": os.defpath, "LANG": "C.UTF-8"}
    assert is_secret_env_name("backlog_worker_api_token")
    assert not is_secret_env_name("BACKLOG_TASK_ID")


async def test_child_never_sees_tracker_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "super-secret-value")
    monkeypatch.setenv("NULLTICKETS_TOKEN", "super-secret-value")
    result = await run_process(
        [PY, "-c", "import os; print(sorted(os.environ.items()))"],
        cwd=tmp_path,
        env=minimal_env(["BACKLOG_WORKER_API_TOKEN", "NULLTICKETS_TOKEN"]),
    )
    assert result.returncode == 0
    assert b"super-secret-value" not in result.stdout


def test_dropped_token_is_logged_by_name_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="backlog_worker.executor.proc")
    name = "BACKLOG_WORKER_LOGTEST_TOKEN"
    for _ in range(3):
        minimal_env([name], base={name: "value-must-not-be-logged"})
    records = [r for r in caplog.records if name in r.getMessage()]
    assert len(records) == 1  # once per name, not per run
    assert getattr(records[0], "action", None) == "env_secret_dropped"
    assert "value-must-not-be-logged" not in caplog.text


async def test_many_concurrent_cancellations_leave_no_orphan(tmp_path: Path) -> None:
    collectors = [PidCollector(want=2) for _ in range(8)]
    try:
        with anyio.fail_after(40):
            async with anyio.create_task_group() as tg:
                for collector in collectors:
                    tg.start_soon(
                        lambda c: run_process(
                            [PY, "-c", STUBBORN_TREE],
                            cwd=tmp_path,
                            env=env(),
                            on_stdout=c,
                            term_grace_s=0.2,
                        ),
                        collector,
                    )
                for collector in collectors:
                    await collector.ready.wait()
                tg.cancel_scope.cancel()
        pids = [p for c in collectors for p in c.pids]
        assert len(pids) == 16
        assert [p for p in pids if pid_alive(p)] == []
    finally:
        kill_leftovers([p for c in collectors for p in c.pids])
