"""A PostgreSQL password in the rail's URL is never shown (docs/operate/security.md): not by
``tracker serve``'s start log, ``check``, ``rail copy``, an operator command's connection error,
nor (with ``--tracker-file``) the process's command line; against the real PostgreSQL of
:mod:`tests.postgres.server` (trust auth: the password is carried, not checked)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres.server import PgServer, fresh_schema_url
from tests.remote.fixtures import wait_listening
from tests.worker.daemonkit import clean_env, make_rail
from tracker_client.urlmask import mask_url

pytestmark = pytest.mark.timeout(120)

USER_PW, QUERY_PW = "Pw-in-userinfo-4711", "Pw-in-query-0815"


def _secret_url(key: str, *, port: int | None = None) -> str:
    url = fresh_schema_url(key).replace("backlog@", f"backlog:{USER_PW}@") + f"&password={QUERY_PW}"
    return url if port is None else re.sub(r":\d+/", f":{port}/", url, count=1)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        env={**clean_env(), **(env or {})},
        timeout=90,
        check=False,
    )


def _no_password(text: str) -> None:
    assert USER_PW not in text and QUERY_PW not in text, text


def test_mask_url_masks_every_form() -> None:
    assert mask_url("postgresql://u:pw@h:5/db?a=1&password=x&sslpassword=y") == (
        "postgresql://u:***@h:5/db?a=1&password=***&sslpassword=***"
    )
    assert mask_url("host=h password='a b' dbname=d") == "host=h password=*** dbname=d"
    assert mask_url("sqlite:///var/a:b@c.db") == "sqlite:///var/a:b@c.db"


def test_operator_commands_and_check_never_show_the_password(
    pg_server: PgServer, tmp_path: Path
) -> None:
    good = _secret_url("url-secrets-ops")
    listed = _cli("task", "list", "--tracker", good)
    assert listed.returncode == 0, listed.stderr
    down = _cli("task", "list", "--tracker", _secret_url("url-secrets-ops", port=1))
    assert down.returncode == 3 and "tracker unreachable" in down.stderr
    assert "backlog:***@" in down.stderr
    config = tmp_path / "worker.toml"
    config.write_text(
        '[[roles]]\nname = "coder"\nexecutor = "command"\n[roles.options]\nargv = ["/bin/true"]\n'
    )
    for url in (good, _secret_url("url-secrets-ops", port=1)):
        checked = _cli("check", "--config", str(config), "--tracker", url)
        assert "tracker" in checked.stdout + checked.stderr
        _no_password(checked.stdout + checked.stderr)
    for result in (listed, down):
        _no_password(result.stdout + result.stderr)
    # The URL from a file: the same rail, no password on the command line.
    url_file = tmp_path / "url"
    url_file.write_text(good + "\n")
    from_file = _cli("task", "list", "--tracker-file", str(url_file), "--json")
    assert from_file.returncode == 0, from_file.stderr
    from_env = _cli("task", "list", env={"BACKLOG_WORKER_TRACKER_URL_FILE": str(url_file)})
    assert from_env.returncode == 0, from_env.stderr
    both = _cli("task", "list", "--tracker", good, "--tracker-file", str(url_file))
    assert both.returncode == 2 and "either --tracker or --tracker-file" in both.stderr


def test_rail_copy_never_shows_the_password(pg_server: PgServer, tmp_path: Path) -> None:
    source = f"sqlite://{make_rail(tmp_path)}"
    copied = _cli("rail", "copy", source, _secret_url("url-secrets-copy"), "--force")
    assert copied.returncode == 0, copied.stderr
    assert "backlog:***@" in copied.stdout
    _no_password(copied.stdout + copied.stderr)
    failed = _cli("rail", "copy", source, _secret_url("url-secrets-copy", port=1))
    assert failed.returncode == 3, failed.stderr
    _no_password(failed.stdout + failed.stderr)


def test_tracker_serve_shows_no_password_in_its_log_nor_in_ps(
    pg_server: PgServer, tmp_path: Path
) -> None:
    url_file = tmp_path / "url"
    url_file.write_text(_secret_url("url-secrets-serve"))
    for how in (["--tracker", _secret_url("url-secrets-serve")], ["--tracker-file", str(url_file)]):
        log = tmp_path / "serve.log"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker", "tracker", "serve", *how, "--port", "0"],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=clean_env(),
            )
        try:
            wait_listening(log, proc, 60)
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        text = log.read_text()
        assert "serving postgresql://backlog:***@" in text and "password=***" in text
        _no_password(text)
        if how[0] == "--tracker-file":
            _no_password(cmdline)
