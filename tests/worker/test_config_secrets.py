"""The api token leaves the worker's environment once the configuration is read: a child can
read ``/proc/<worker pid>/environ``, which shows the *initial* environment, so the entry is wiped
there too; later loads (HUP reload) still see the token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

TOKEN = "tok-very-secret-4711"

#: A child that reports what it can see of its parent's and its own environment (no braces:
#: the command executor would take them for placeholders).
PEEK = (
    "import json, os, sys\n"
    "parent = open('/proc/%d/environ' % os.getppid(), 'rb').read()\n"
    "own = open('/proc/self/environ', 'rb').read()\n"
    "report = dict(ppid=os.getppid(), parent_bytes=len(parent),\n"
    "              in_parent=sys.argv[1].encode() in parent,\n"
    "              in_own=sys.argv[1].encode() in own)\n"
    "if len(sys.argv) > 2:\n"
    "    open(sys.argv[2], 'w').write(json.dumps(report))\n"
    "else:\n"
    "    print(json.dumps(report))\n"
)


def clean_env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("BACKLOG_WORKER_")}
    return {**base, **extra}


def test_release_wipes_the_token_from_proc_environ_and_keeps_it_for_reloads(
    tmp_path: Path,
) -> None:
    script = (
        "import json, os, subprocess, sys\n"
        "from worker.config.models import load_config\n"
        "from worker.config.secrets import release_secret_env\n"
        "token = load_config().tracker.api_token\n"
        "released = release_secret_env()\n"
        f"child = subprocess.run([sys.executable, '-c', {PEEK!r}, token],\n"
        "                       capture_output=True, text=True, check=True)\n"
        "print(json.dumps({'released': released, 'child': json.loads(child.stdout),\n"
        "                  'self': token.encode() in open('/proc/self/environ', 'rb').read(),\n"
        "                  'environ': 'BACKLOG_WORKER_API_TOKEN' in os.environ,\n"
        "                  'reload': load_config().tracker.api_token == token}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_env(BACKLOG_WORKER_API_TOKEN=TOKEN, BACKLOG_WORKER_TRACKER__API_TOKEN=TOKEN),
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    report = json.loads(result.stdout)
    assert sorted(report["released"]) == [
        "BACKLOG_WORKER_API_TOKEN",
        "BACKLOG_WORKER_TRACKER__API_TOKEN",
    ]
    assert report["child"]["parent_bytes"] > 0  # the child could read the parent's environ...
    assert report["child"]["in_parent"] is False  # ...and the token is not in it
    assert report["child"]["in_own"] is False  # nor inherited
    assert report["self"] is False
    assert report["environ"] is False
    assert report["reload"] is True


PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


async def _seed(db: Path) -> None:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        await tracker.create_tasks([TaskCreate(pipeline_id=pid, title="peek")])
    finally:
        await tracker.aclose()


@pytest.mark.timeout(120)
def test_an_executor_cannot_read_the_token_from_its_worker(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db)
    out = tmp_path / "peek.json"
    config = tmp_path / "worker.toml"
    argv = json.dumps([sys.executable, "-c", PEEK, TOKEN, str(out)])
    config.write_text(
        f'[tracker]\nurl = "sqlite:///{db}"\n[worker]\nidle_max_s = 0.2\n'
        f'[[roles]]\nname = "coder"\nexecutor = "command"\n[roles.options]\nargv = {argv}\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--drain", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(BACKLOG_WORKER_API_TOKEN=TOKEN),
        cwd=tmp_path,
    )
    try:
        _, stderr = proc.communicate(timeout=100)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    report = json.loads(out.read_text())
    assert report["ppid"] == proc.pid  # the executor's parent is the worker itself
    assert report["parent_bytes"] > 0
    assert report["in_parent"] is False
    assert report["in_own"] is False
