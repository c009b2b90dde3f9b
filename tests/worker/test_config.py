"""Configuration: precedence, validation errors naming key and file, secrets kept out of reprs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker_client.errors import ConfigError
from worker.config.models import load_config

ROLE = '[[roles]]\nname = "coder"\nexecutor = "command"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(text)
    return path


def test_example_config_is_valid() -> None:
    config = load_config(Path(__file__).parents[2] / "config.example.toml")
    assert config.roles[0].name == "coder"
    assert config.worker.concurrency == 4


def test_precedence_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[worker]\nconcurrency = 2\nlease_ttl_s = 9\n" + ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__CONCURRENCY", "5")
    monkeypatch.setenv("BACKLOG_WORKER_WORKER__LEASE_TTL_S", "7")
    config = load_config(path, **{"worker.concurrency": 8})
    assert config.worker.concurrency == 8  # flag beats env
    assert config.worker.lease_ttl_s == 7  # env beats file
    assert config.roles[0].name == "coder"  # the file fills what env and flags leave out
    monkeypatch.delenv("BACKLOG_WORKER_WORKER__LEASE_TTL_S")
    merged = load_config(path).worker
    assert (merged.concurrency, merged.lease_ttl_s) == (5, 9)  # nested tables merge per key


def test_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[worker]\nconcurency = 2\n")
    with pytest.raises(ConfigError, match=r"worker\.toml: \[worker\] concurency: unknown key"):
        load_config(path)


def test_bad_value_names_key(tmp_path: Path) -> None:
    path = write(tmp_path, ROLE + "timeout_s = -1\n")
    with pytest.raises(
        ConfigError, match=r"\[\[roles\]\] #1 \(coder\) timeout_s: Input should be greater"
    ):
        load_config(path)


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[worker\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_duplicate_role_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="role 'coder' is configured twice"):
        load_config(write(tmp_path, ROLE + ROLE))


def test_idle_bounds_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="idle_max_s"):
        load_config(write(tmp_path, "[worker]\nidle_min_s = 5\nidle_max_s = 1\n"))


def test_token_file_from_credentials_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "api-token").write_text("s3cret-token\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    config = load_config(write(tmp_path, '[tracker]\napi_token_file = "api-token"\n'))
    assert config.tracker.api_token == "s3cret-token"
    assert "s3cret" not in repr(config)


def test_empty_token_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        load_config(write(tmp_path, f'[tracker]\napi_token_file = "{tmp_path}/tok"\n'))


def test_env_shortcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "tok")
    monkeypatch.setenv("BACKLOG_WORKER_AGENT_ID", "agent-7")
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER_URL", "http://127.0.0.1:1")
    config = load_config()
    assert config.tracker.api_token == "tok"
    assert config.worker.agent_id == "agent-7"
    assert config.tracker.url == "http://127.0.0.1:1"


def test_default_agent_id_uses_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_INSTANCE", "3")
    assert load_config().worker.agent_id.endswith("-3")


def test_nested_variable_beats_its_short_form_and_leaves_the_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layers merge lowest first (file < short env forms < nested env < flags), table by
    table, without changing what the file said (the merge makes new tables)."""
    path = write(tmp_path, '[tracker]\nurl = "http://127.0.0.1:3"\n' + ROLE)
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER__URL", "http://127.0.0.1:2")
    assert load_config(path).tracker.url == "http://127.0.0.1:2"
    monkeypatch.delenv("BACKLOG_WORKER_TRACKER__URL")
    assert load_config(path).tracker.url == "http://127.0.0.1:1"
    monkeypatch.delenv("BACKLOG_WORKER_TRACKER_URL")
    assert load_config(path).tracker.url == "http://127.0.0.1:3"
    flagged = load_config(path, **{"tracker.url": "http://127.0.0.1:4"})
    assert flagged.tracker.url == "http://127.0.0.1:4"
    assert load_config(path).tracker.url == "http://127.0.0.1:3"
