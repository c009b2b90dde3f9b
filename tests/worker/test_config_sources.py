"""Config errors name their real source: the file (with its table and key), the environment
variable, or the command-line flag; misspelled ``BACKLOG_WORKER_*`` variables are refused as
environment variables, with the closest real name when there is one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracker_client.errors import ConfigError
from worker.config.models import load_config

ROLE = '[[roles]]\nname = "coder"\nexecutor = "command"\n'


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No BACKLOG_WORKER_* variable from the outside; relative paths land in tmp_path."""
    for name in list(os.environ):
        if name.upper().startswith("BACKLOG_WORKER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(text)
    return path


def error_of(path: Path | None = None, **overrides: object) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, **overrides)
    return str(info.value)


# -- a bad value, one per source -------------------------------------------------------------
def test_bad_value_in_the_file_names_file_table_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[worker]\nconcurrency = "many"\n' + ROLE)
    message = error_of(path)
    assert message.startswith(f"{path}: [worker] concurrency: Input should be a valid integer")
    assert "environment" not in message


def test_bad_value_in_a_role_names_the_role(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, ROLE + "timeout_s = -1\n"))
    assert "worker.toml: [[roles]] #1 (coder) timeout_s: Input should be greater than 0" in message


def test_bad_value_in_a_schedule_names_its_entry_counted_from_one(tmp_path: Path) -> None:
    """As ``[[roles]] #1``: the reader counts a file's ``[[schedules]]`` from 1, not from 0."""
    schedule = '[[schedules]]\nname = "n"\npipeline = "p"\ntitle = "t"\ncron = "%s"\n'
    message = error_of(write(tmp_path, ROLE + schedule % "0 3 * * *" + schedule % "0 25 * * *"))
    assert message.startswith(f"{tmp_path / 'worker.toml'}: [[schedules]] #2 cron: '0 25 * * *'")


def test_bad_value_in_the_environment_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[worker]\nconcurrency = 2\n" + ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__CONCURRENCY", "abc")
    message = error_of(path)
    assert message.startswith("BACKLOG_WORKER_WORKER__CONCURRENCY: Input should be a valid integer")
    assert message.endswith("(environment)")
    assert str(path) not in message and "worker.toml" not in message


def test_bad_value_from_a_flag_names_the_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "[worker]\nconcurrency = 2\n" + ROLE)
    message = error_of(path, **{"worker.concurrency": 0})
    assert message == "--concurrency: Input should be greater than or equal to 1"


def test_each_error_names_its_own_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[worker]\nlease_ttl_s = -5\n" + ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__CONCURRENCY", "abc")
    message = error_of(path, **{"log_format": "fancy"})
    assert "BACKLOG_WORKER_WORKER__CONCURRENCY: Input should be a valid integer" in message
    assert f"{path}: [worker] lease_ttl_s: Input should be greater than 0" in message
    assert "--log-format: must be one of auto, rich, plain, journal, json" in message


def test_an_env_value_that_overrides_a_bad_file_value_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, '[worker]\nconcurrency = "many"\n' + ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__CONCURRENCY", "3")
    assert load_config(path).worker.concurrency == 3


def test_json_env_value_names_the_variable_and_the_place_inside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_ROLES", '[{"name": "a"}]')
    assert error_of() == "BACKLOG_WORKER_ROLES: [0].executor: Field required (environment)"
    monkeypatch.setenv("BACKLOG_WORKER_ROLES", "[{")
    assert error_of().startswith("BACKLOG_WORKER_ROLES: not valid JSON")


def test_out_of_range_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__LEASE_TTL_S", "0")
    assert error_of() == (
        "BACKLOG_WORKER_WORKER__LEASE_TTL_S: Input should be greater than 0 (environment)"
    )


def test_cross_key_rule_names_both_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[worker]\nidle_min_s = 0.5\n" + ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__IDLE_MAX_S", "0.1")
    message = error_of(path)
    assert "BACKLOG_WORKER_WORKER__IDLE_MAX_S (environment)" in message
    assert f"{path}: [worker] idle_min_s" in message


def test_unreadable_token_file_names_where_the_path_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER__API_TOKEN_FILE", str(tmp_path / "missing"))
    message = error_of()
    assert message.startswith("BACKLOG_WORKER_TRACKER__API_TOKEN_FILE: ")
    assert "cannot be read" in message and message.endswith("(environment)")


# -- misspelled environment variables ---------------------------------------------------------
def test_nested_env_typo_is_an_environment_error_with_a_suggestion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__CONCURENCY", "4")
    message = error_of(path)
    assert message == (
        "BACKLOG_WORKER_WORKER__CONCURENCY: unknown setting (environment); "
        "did you mean BACKLOG_WORKER_WORKER__CONCURRENCY?"
    )


def test_top_level_env_typo_is_refused_not_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_CONCURRENCY", "4")
    assert error_of().endswith("did you mean BACKLOG_WORKER_WORKER__CONCURRENCY?")
    monkeypatch.delenv("BACKLOG_WORKER_CONCURRENCY")
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER_ULR", "http://127.0.0.1:1")
    assert error_of().endswith("did you mean BACKLOG_WORKER_TRACKER_URL?")


def test_env_typo_in_a_section_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_WORKR__LEASE_TTL_S", "5")
    message = error_of()
    assert message.startswith("BACKLOG_WORKER_WORKR__LEASE_TTL_S: unknown setting (environment)")
    assert message.endswith("did you mean BACKLOG_WORKER_WORKER__LEASE_TTL_S?")


def test_env_name_like_nothing_gets_no_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_ZQX", "1")
    assert error_of() == "BACKLOG_WORKER_ZQX: unknown setting (environment)"


def test_misspelled_token_variable_never_shows_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKN", "very-secret-value")
    message = error_of()
    assert (
        "BACKLOG_WORKER_API_TOKN" in message and "did you mean BACKLOG_WORKER_API_TOKEN?" in message
    )
    assert "very-secret-value" not in message


def test_short_forms_and_other_worker_variables_stay_valid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "tok")
    monkeypatch.setenv("BACKLOG_WORKER_AGENT_ID", "agent-7")
    monkeypatch.setenv("BACKLOG_WORKER_INSTANCE", "3")
    monkeypatch.setenv("BACKLOG_WORKER_DEBUG", "1")
    monkeypatch.setenv("BACKLOG_WORKER_CONFIG", "")
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER__OPTIONS__SYNCHRONOUS", "FULL")
    monkeypatch.setenv("backlog_worker_worker__concurrency", "7")
    config = load_config()
    assert config.tracker.url == "http://127.0.0.1:1"
    assert config.tracker.api_token == "tok"
    assert config.worker.agent_id == "agent-7"
    assert config.tracker.options == {"synchronous": "FULL"}
    assert config.worker.concurrency == 7


def test_unknown_file_key_suggests_the_close_one(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "[worker]\nconcurency = 2\n"))
    assert message.endswith(
        "worker.toml: [worker] concurency: unknown key (did you mean 'concurrency'?)"
    )


# -- end to end: a real `backlog-worker` process ----------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("command", "env", "expected"),
    [
        (
            ["check"],
            {"BACKLOG_WORKER_WORKER__CONCURRENCY": "abc"},
            "BACKLOG_WORKER_WORKER__CONCURRENCY: Input should be a valid integer",
        ),
        (
            ["check"],
            {"BACKLOG_WORKER_WORKER__CONCURENCY": "4"},
            "BACKLOG_WORKER_WORKER__CONCURENCY: unknown setting (environment); "
            "did you mean BACKLOG_WORKER_WORKER__CONCURRENCY?",
        ),
        (
            ["run", "--drain", "--concurrency", "0"],
            {},
            "--concurrency: Input should be greater than or equal to 1",
        ),
        (
            ["run", "--drain"],
            {"BACKLOG_WORKER_TRACKER__URLL": "sqlite:///./other.db"},
            "BACKLOG_WORKER_TRACKER__URLL: unknown setting (environment); "
            "did you mean BACKLOG_WORKER_TRACKER__URL?",
        ),
    ],
)
def test_cli_names_the_real_source(
    tmp_path: Path, command: list[str], env: dict[str, str], expected: str
) -> None:
    path = write(tmp_path, '[tracker]\nurl = "sqlite:///./rail.db"\n[worker]\nconcurrency = 2\n')
    with path.open("a") as fh:
        fh.write(ROLE + 'options = { argv = ["true"] }\n')
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("BACKLOG_WORKER_")}
    result = subprocess.run(
        [sys.executable, "-m", "worker", *command, "--config", str(path)],
        capture_output=True,
        text=True,
        env={**base, **env},
        cwd=tmp_path,
        timeout=100,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "worker.toml" not in result.stderr  # the file is not blamed for what it did not say
    assert not (tmp_path / "rail.db").exists()  # refused before anything was opened


@pytest.mark.timeout(60)
def test_tracker_serve_refuses_a_misspelled_token_variable(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("BACKLOG_WORKER_")}
    argv = [sys.executable, "-m", "worker", "tracker", "serve", "--tracker", "sqlite:///./rail.db"]
    proc = subprocess.Popen(
        [*argv, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**base, "BACKLOG_WORKER_API_TOKN": "never-shown"},
        cwd=tmp_path,
    )
    try:
        _, stderr = proc.communicate(timeout=30)  # before the fix it served, unauthenticated
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, stderr
    assert "BACKLOG_WORKER_API_TOKN: unknown setting (environment)" in stderr
    assert "did you mean BACKLOG_WORKER_API_TOKEN?" in stderr
    assert "never-shown" not in stderr


def test_a_default_is_not_blamed_on_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[worker]\nconcurrency = 2\n" + ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__IDLE_MAX_S", "0.01")
    message = error_of(path)
    assert "idle_min_s from default" in message
    assert "worker.toml" not in message
