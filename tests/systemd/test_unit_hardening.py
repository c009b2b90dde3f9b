"""The worker and tracker units' sandbox: which directives, the ``systemd-analyze security``
score they reach, and that the worker, its executors and the server still work under the
kernel mechanisms behind the seccomp and memory settings (``tests/systemd/sandbox_exec.py``)."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.needs import in_ci, require_tool
from tests.systemd.unitkit import SYSTEMD_ANALYZE, needs_analyze, security, settings
from worker.cli.systemd.unit import CONTRIB_EXEC, UnitOptions, render_service

# units render as for an install under /opt wherever this checkout is (conftest.py)
pytestmark = pytest.mark.usefixtures("stable_install")

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "systemd"
REPO = Path(__file__).resolve().parents[2]
SYSCALL_HEADER = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
IN_CI = in_ci()

#: Every unit keeps these (the worker runs executors: fork/exec, network, its workdir).
COMMON = {
    "UMask": "0077",
    "NoNewPrivileges": "yes",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "PrivateMounts": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "ProtectProc": "invisible",
    "RemoveIPC": "yes",
    "RestrictSUIDSGID": "yes",
    "RestrictRealtime": "yes",
    "LockPersonality": "yes",
    "RestrictNamespaces": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "SystemCallArchitectures": "native",
    "SystemCallFilter": "@system-service",
    "SystemCallErrorNumber": "EPERM",
}


def _one(text: str) -> dict[str, str]:
    s = settings(text)
    return {key: values[-1] for key, values in s.items()}


def test_the_worker_unit_has_the_whole_sandbox_but_not_memory_deny_write_execute():
    s = _one((CONTRIB / "backlog-worker@.service").read_text())
    assert {key: s.get(key) for key in COMMON} == COMMON
    assert "MemoryDenyWriteExecute" not in s  # JIT runtimes (node) that executors run abort
    assert "PrivateNetwork" not in s and "IPAddressDeny" not in s  # trackers, providers
    assert "ProcSubset" not in s  # executors read /proc/meminfo, /proc/cpuinfo
    opted = _one(render_service(UnitOptions(memory_deny_write_execute=True)))
    assert opted["MemoryDenyWriteExecute"] == "yes"


def test_the_tracker_unit_has_the_whole_sandbox_and_memory_deny_write_execute():
    s = _one((CONTRIB / "backlog-tracker.service").read_text())
    assert {key: s.get(key) for key in COMMON} == COMMON
    assert s["MemoryDenyWriteExecute"] == "yes"


def test_a_user_unit_keeps_the_seccomp_settings_without_mount_namespaces():
    s = _one(render_service(UnitOptions(user_mode=True)))
    for key in ("RestrictNamespaces", "SystemCallFilter", "RestrictAddressFamilies",
                "LockPersonality", "NoNewPrivileges", "UMask"):  # fmt: skip
        assert s[key] == COMMON[key]
    for key in ("ProtectSystem", "PrivateTmp", "CapabilityBoundingSet", "ProtectProc"):
        assert key not in s  # the per-user manager cannot set these up


@needs_analyze
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("backlog-worker@.service", (CONTRIB / "backlog-worker@.service").read_text()),
        ("backlog-tracker.service", (CONTRIB / "backlog-tracker.service").read_text()),
        ("mdwe@.service", render_service(UnitOptions(memory_deny_write_execute=True))),
    ],
)
def test_systemd_analyze_security_rates_the_units_ok(tmp_path, name, text):
    # Measured with systemd 252: 7.0 (MEDIUM) before this sandbox; now 1.5 for the worker
    # (1.4 with --memory-deny-write-execute) and 1.3 for the tracker. What is left is what
    # the executors need: the network (PrivateNetwork, IPAddressDeny), other users' files
    # (PrivateUsers), /proc's system files (ProcSubset), chown/setrlimit (@privileged,
    # @resources: git, tar, nice) and, for the worker, JIT memory.
    unit = tmp_path / name
    unit.write_text(text.replace(CONTRIB_EXEC[0], shutil.which("backlog-worker") or "/bin/true"))
    score, table = security(unit)
    assert score <= 2.0, table
    assert not re.search(r"✗ (NoNewPrivileges|SystemCallArchitectures|RestrictNamespaces)=", table)


# -- what the executors still get under the kernel mechanisms ------------------------------------


def _allowed_syscalls() -> list[int]:
    """``@system-service`` expanded by systemd-analyze, as x86_64 syscall numbers."""
    assert SYSTEMD_ANALYZE is not None
    out = subprocess.run(
        [SYSTEMD_ANALYZE, "syscall-filter"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())
    names: set[str] = set()
    todo, seen = ["@system-service"], set()
    while todo:
        for member in groups[todo.pop()]:
            if member.startswith("@") and member not in seen:
                seen.add(member)
                todo.append(member)
            elif not member.startswith("@"):
                names.add(member)
    numbers = dict(
        (m.group(1), int(m.group(2)))
        for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)", SYSCALL_HEADER.read_text())
    )
    return sorted(numbers[n] for n in names if n in numbers)


def _sandboxed(tmp_path: Path, flags: list[str], *argv: str, timeout: float = 120):
    cmd = [sys.executable, "-m", "tests.systemd.sandbox_exec", *flags]
    if "--seccomp" in flags:
        allowed = tmp_path / "allowed-syscalls"
        allowed.write_text("\n".join(map(str, _allowed_syscalls())) + "\n")
        cmd[cmd.index("--seccomp") + 1 : cmd.index("--seccomp") + 1] = [str(allowed)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = str(REPO)
    # The command is looked up on PATH by execvp: the running install's scripts come first
    # (CI runs ``.venv/bin/python -m pytest`` without activating the venv).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run(
        [*cmd, "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    if proc.returncode == 125:
        pytest.skip(f"this kernel refuses the setting: {proc.stderr.strip()}")
    return proc


def _mdwe_supported() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(66, 0, 0, 0, 0) >= 0  # PR_GET_MDWE: EINVAL before Linux 6.3


needs_mdwe = pytest.mark.skipif(not _mdwe_supported(), reason="PR_SET_MDWE needs Linux >= 6.3")
needs_seccomp_table = pytest.mark.skipif(
    os.uname().machine != "x86_64"
    or ((SYSTEMD_ANALYZE is None or not SYSCALL_HEADER.is_file()) and not IN_CI),
    reason="needs x86_64, systemd-analyze and the syscall numbers (linux-libc-dev)",
)


@pytest.mark.timeout(120)
@needs_mdwe
@needs_seccomp_table
def test_workers_and_command_executors_run_under_the_worker_sandbox(tmp_path):
    # The demo: an embedded rail, two worker processes, command executors (Python children)
    # with retries, a reject loop and a dead letter; all of it under SystemCallFilter=
    # @system-service, RestrictAddressFamilies and (the opt-in) MemoryDenyWriteExecute.
    proc = _sandboxed(
        tmp_path, ["--seccomp", "--mdwe"], "backlog-worker", "demo", "--tasks", "6",
        "--workers", "2", "--timeout", "90s",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"│ done\s+│\s+5 │", proc.stdout), proc.stdout
    assert re.search(r"│ dead-lettered\s+│\s+1 │", proc.stdout), proc.stdout


@needs_seccomp_table
def test_the_syscall_sandbox_does_refuse(tmp_path):
    probe = (
        "import os, socket\n"
        "try:\n    os.chroot('/')\nexcept OSError as e:\n    print('chroot', e.errno)\n"
        "try:\n    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)\n"
        "except OSError as e:\n    print('netlink', e.errno)\n"
        "socket.socket(socket.AF_INET6).close()\nprint('inet6 ok')\n"
    )
    proc = _sandboxed(tmp_path, ["--seccomp"], sys.executable, "-c", probe)
    assert proc.stdout.split("\n")[:3] == ["chroot 1", "netlink 97", "inet6 ok"], proc.stderr


@needs_mdwe
def test_memory_deny_write_execute_kills_node_which_is_why_it_is_opt_in(tmp_path):
    node = require_tool("node", "apt-get install nodejs; .ci/run installs it")
    assert _sandboxed(tmp_path, [], node, "-e", "console.log(6*7)").stdout == "42\n"
    proc = _sandboxed(tmp_path, ["--mdwe"], node, "-e", "console.log(6*7)")
    assert proc.returncode != 0 and "42" not in proc.stdout  # V8's JIT cannot map code


@pytest.mark.timeout(60)
@needs_mdwe
@needs_seccomp_table
def test_tracker_serve_answers_under_the_tracker_sandbox(tmp_path):
    # The tracker unit sets MemoryDenyWriteExecute=yes by default: serve a real rail under it.
    rail = tmp_path / "rail.db"
    create = _sandboxed(
        tmp_path, ["--seccomp", "--mdwe"], "backlog-worker", "pipeline", "create",
        "--tracker", f"sqlite://{rail}", "p", "--state", "todo=coder", "--terminal", "done",
        "--transition", "todo:complete:done",
    )  # fmt: skip
    if create.returncode != 0:
        pytest.fail(create.stdout + create.stderr)
    probe = (
        "import subprocess, sys, re, time, httpx\n"
        f"p = subprocess.Popen(['backlog-worker', 'tracker', 'serve', '--tracker',"
        f" 'sqlite://{rail}', '--port', '0'], stderr=subprocess.PIPE, text=True)\n"
        "deadline = time.monotonic() + 30\n"
        "for line in p.stderr:\n"
        "    m = re.search(r'listening on (http://[0-9.:]+)', line)\n"
        "    if m or time.monotonic() > deadline:\n        break\n"
        "print(httpx.get(m.group(1) + '/pipelines', timeout=10).json()[0]['name'])\n"
        "p.terminate(); p.wait(20)\n"
    )
    proc = _sandboxed(tmp_path, ["--seccomp", "--mdwe"], sys.executable, "-c", probe)
    assert proc.stdout.strip() == "p", proc.stdout + proc.stderr
