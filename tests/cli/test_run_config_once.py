"""``backlog-worker run`` reads its configuration once as it starts: the worker runs the
configuration it checked (not a second read of a file that may have changed meanwhile), and
start-up does not merge the configuration's layers twice (docs/benchmarks.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Rail

JOB = "def work(ctx):\n    return None\n"

#: A real ``backlog-worker run`` with an audit hook that counts the opens of the config file.
CHILD = """
import atexit, sys
path = sys.argv.pop(1)
opens = []
def hook(event, args):
    if event == "open" and args and str(args[0]) == path:
        opens.append(args[1])
sys.addaudithook(hook)
atexit.register(lambda: print(f"config opened {len(opens)} time(s)", file=sys.stderr))
sys.argv[0] = "backlog-worker"
from worker.cli import main
main()
"""


def test_run_reads_its_configuration_once(simple: Rail, tmp_path: Path) -> None:
    (tmp_path / "oncejobs.py").write_text(JOB)
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[tracker]\nurl = "{simple.url}"\n'
        "[worker]\nconcurrency = 2\ndrain = true\nidle_min_s = 0.01\nidle_max_s = 0.05\n"
        '[[roles]]\nname = "coder"\nexecutor = "python"\n'
        'options = { callable = "oncejobs:work" }\n'
    )
    simple.add("one")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(config), "run", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "config opened 1 time(s)" in done.stderr, done.stderr[-2000:]
    stages = {t["title"]: t["stage"] for t in simple.json("task", "list", "--all")["items"]}
    assert stages == {"one": "done"}, stages
