"""``readiness()``: one line per problem, empty when the role can run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from plugins.nullclaw.executor import NullClawExecutor
from plugins.nullclaw.readiness import check_config_file
from tests.nocaps import drop_dac_override

pytestmark = pytest.mark.anyio


async def test_ready_with_generated_config(options: dict[str, Any]) -> None:
    assert await NullClawExecutor(options).readiness() == []


async def test_ready_with_existing_home(tmp_path: Path, fake_bin: Path) -> None:
    home = tmp_path / "home"
    (home / ".nullclaw").mkdir(parents=True)
    (home / ".nullclaw" / "config.json").write_text(
        '{"agents": {"defaults": {"model": {"primary": "fakellm/m"}}}}'
    )
    assert await NullClawExecutor({"binary": str(fake_bin), "home": str(home)}).readiness() == []


async def test_missing_binary(tmp_path: Path, options: dict[str, Any]) -> None:
    path_binary = {**options, "binary": str(tmp_path / "none" / "nullclaw")}
    [line] = await NullClawExecutor(path_binary).readiness()
    assert "is not an executable file" in line
    named = {**options, "binary": "nullclaw-not-installed-anywhere"}
    [line] = await NullClawExecutor(named).readiness()
    assert "'nullclaw-not-installed-anywhere' not on PATH" in line


async def test_version_failing_or_hanging(
    options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_VERSION", "fail")
    [line] = await NullClawExecutor(options).readiness()
    assert "version` failed (rc 1): panic: reached unreachable code" in line
    monkeypatch.setenv("FAKE_NULLCLAW_VERSION", "hang")
    [line] = await NullClawExecutor({**options, "version_timeout_s": 0.5}).readiness()
    assert "did not answer within 0.5s" in line


async def test_not_a_nullclaw_binary(tmp_path: Path, options: dict[str, Any]) -> None:
    impostor = tmp_path / "impostor"
    impostor.write_text("#!/bin/sh\necho hello\n")
    impostor.chmod(0o755)
    [line] = await NullClawExecutor({**options, "binary": str(impostor)}).readiness()
    assert "version` failed (rc 0): hello" in line


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        (None, "does not exist"),
        ("{oops", "is not valid JSON"),
        ("[1]", "must hold a JSON object"),
        (
            '{"default_provider": "x", "agents": {"defaults": {"model": {"primary": "a/b"}}}}',
            "legacy top-level key 'default_provider'",
        ),
        ('{"agents": {"defaults": {}}}', "has no default model"),
        ('{"agents": {"defaults": {"model": {"primary": "nomodel"}}}}', "'<provider>/<model>'"),
    ],
)
async def test_existing_config_problems(
    tmp_path: Path, fake_bin: Path, config: str | None, needle: str
) -> None:
    home = tmp_path / "home"
    (home / ".nullclaw").mkdir(parents=True)
    if config is not None:
        (home / ".nullclaw" / "config.json").write_text(config)
    problems = await NullClawExecutor({"binary": str(fake_bin), "home": str(home)}).readiness()
    assert len(problems) == 1
    assert needle in problems[0]
    assert str(home / ".nullclaw" / "config.json") in problems[0]


def test_overrides_stand_in_for_a_default_model(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    assert check_config_file(path, overrides_model=True) == []
    assert check_config_file(path, overrides_model=False) != []


async def test_curl_missing_and_key_missing_and_bad_workspace(
    tmp_path: Path,
    options: dict[str, Any],
    python_only_path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", python_only_path)
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    opts = {
        **options,
        "binary": "nullclaw",
        "api_key_env": "NO_SUCH_KEY",
        "workspace": "shared",
        "workspace_dir": str(blocker / "ws"),
    }
    problems = await NullClawExecutor(opts).readiness()
    assert len(problems) == 3, problems
    assert "api_key_env: environment variable NO_SUCH_KEY is not set" in problems[0]
    assert problems[1].startswith("curl is not on PATH")
    assert "is not a directory" in problems[2]


#: The readiness check in a child process, its problems printed as JSON.
_READINESS = (
    "import json, sys, anyio\n"
    "from plugins.nullclaw.executor import NullClawExecutor\n"
    "print(json.dumps(anyio.run(NullClawExecutor(json.loads(sys.argv[1])).readiness)))\n"
)


async def test_unwritable_workspace_dir(tmp_path: Path, options: dict[str, Any]) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    opts = {**options, "workspace": "task", "workspace_dir": str(ro / "ws")}
    if os.geteuid() != 0:
        [line] = await NullClawExecutor(opts).readiness()
    else:  # root writes anywhere: ask a child root that kept only an owner's rights
        done = subprocess.run(
            [sys.executable, "-c", _READINESS, json.dumps(opts)],
            capture_output=True,
            check=True,
            preexec_fn=drop_dac_override,
            timeout=30,
        )
        [line] = json.loads(done.stdout)
    assert "is not writable" in line


async def test_config_probe_lets_nullclaw_judge_its_config(
    tmp_path: Path, options: dict[str, Any], fake_bin: Path
) -> None:
    # static checks cannot know every rule; nullclaw itself rejects this one (rc 0, no stdout)
    bad = {**options, "config": {"default_temperature": 5}}
    [line] = await NullClawExecutor(bad).readiness()
    assert line.startswith("nullclaw rejects its configuration")
    assert "temperature must be between 0.0 and 2.0" in line
    assert await NullClawExecutor({**bad, "config_probe": False}).readiness() == []

    home = tmp_path / "home"
    (home / ".nullclaw").mkdir(parents=True)
    (home / ".nullclaw" / "config.json").write_text(
        '{"agents": {"defaults": {"model": {"primary": "fakellm/m"}}}, "default_temperature": 9}'
    )
    [line] = await NullClawExecutor({"binary": str(fake_bin), "home": str(home)}).readiness()
    assert "temperature must be between" in line


async def test_legacy_key_in_config_option_is_named(options: dict[str, Any]) -> None:
    opts = {**options, "config": {"default_model": "x"}}
    [line] = await NullClawExecutor(opts).readiness()
    assert line == "option 'config': top-level key 'default_model' is rejected by nullclaw"
