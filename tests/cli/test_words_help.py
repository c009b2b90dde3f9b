"""Words that say what they mean: ``--max-attempts`` counts attempts, an unmapped exit status
names the codes mapped to success, ``attempt`` numbers every run of a task across stages, and the
docs give ``tracker serve`` one port. Through the real CLI and a real worker on a real rail."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import SIMPLE, Rail, invoke
from tests.docs.blocks import ROOT, doc_pages
from tests.worker.daemonkit import clean_env


def test_max_attempts_help_counts_attempts() -> None:
    for command in (["task", "add"], ["submit"]):
        result = invoke([*command, "--help"])
        text = " ".join(result.stdout.split())
        assert "Failures allowed" not in text
        assert "Attempts before a dead letter" in text, command


def _role(name: str, argv: list[str], codes: dict[str, str]) -> str:
    mapping = ", ".join(f'"{k}" = "{v}"' for k, v in codes.items())
    return (
        f'[[roles]]\nname = "{name}"\nexecutor = "command"\n[roles.options]\n'
        f"argv = {json.dumps(argv)}\nexit_codes = {{ {mapping} }}\n"
    )


def _drain(tmp_path: Path, rail: Rail, *roles: str) -> None:
    cfg = tmp_path / "worker.toml"
    worker = "[worker]\nidle_min_s = 0.01\nidle_max_s = 0.05\n"
    cfg.write_text(f'[tracker]\nurl = "{rail.url}"\n{worker}' + "".join(roles))
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--config", str(cfg), "--drain"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def _runs(rail: Rail, task_id: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = rail.json("task", "show", task_id, "--all")["runs"]
    return sorted(runs, key=lambda r: r["attempt"])


@pytest.mark.timeout(90)
def test_an_unmapped_exit_status_names_the_codes_mapped_to_success(
    rail: Rail, tmp_path: Path
) -> None:
    rail.pipeline()
    task_id = rail.add("exits 3", "--max-attempts", "1")
    script = [sys.executable, "-c", "raise SystemExit(3)"]
    _drain(tmp_path, rail, _role("coder", script, {"0": "complete"}))
    (run,) = _runs(rail, task_id)
    assert run["status"] == "failed"
    assert "exited with status 3 (exit codes mapped to success: 0)" in run["error"]


@pytest.mark.timeout(90)
def test_attempt_numbers_every_run_of_the_task_across_stages(rail: Rail, tmp_path: Path) -> None:
    """What the concepts page says: todo (coder) -> check (checker) is attempt 1 then 2."""
    rail.pipeline("simple", SIMPLE)
    task_id = rail.add("two stages")
    ok = [sys.executable, "-c", "pass"]
    _drain(
        tmp_path,
        rail,
        _role("coder", ok, {"0": "verify"}),
        _role("checker", ok, {"0": "approve"}),
    )
    runs = _runs(rail, task_id)
    assert [(r["attempt"], r["agent_role"], r["status"]) for r in runs] == [
        (1, "coder", "completed"),
        (2, "checker", "completed"),
    ]
    concepts = (ROOT / "docs/getting-started/concepts.md").read_text().split("## The words", 1)[1]
    assert "attempt counts every run of the task" in " ".join(concepts.split())


def test_the_docs_give_tracker_serve_one_port_and_a_loopback_listen_address() -> None:
    text = "\n".join(page.read_text() for page in doc_pages())
    ports = {
        (m.group(1), m.group(2))
        for line in text.splitlines()
        if "base_url" not in line  # an LLM endpoint, not the tracker
        and "/metrics" not in line  # a Prometheus endpoint ([metrics] listen), not the tracker
        and "/v1/traces" not in line  # an OTLP collector ([tracing] endpoint), not the tracker
        and "mkdocs serve" not in line  # the docs' own preview server, not the tracker
        for m in re.finditer(r"https?://([\w.-]+):(\d+)", line)
    }
    assert ports, "no tracker URL in the docs"
    assert {port for _host, port in ports} == {"7700"}, ports
    assert set(re.findall(r"--port (\d+)", text)) <= {"7700", "0"}
    assert set(re.findall(r"--host (\S+)", text)) <= {"127.0.0.1"}
