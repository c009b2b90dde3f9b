"""Token guessing against a real ``tracker serve`` on 127.0.0.1 (docs/operate/security.md):
wrong admin tokens are throttled and logged per client address (never the token), the address
is the TCP peer's whatever ``X-Forwarded-For`` says (unless ``--trusted-proxy``), on the API, the
dashboard's login and the metrics port; a weak or world-readable token file is warned about."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.dashboard.conftest import process
from tests.worker.daemonkit import make_rail

TOKEN = "throttle-test-token-0123456789"
WRONG = "wrong-guess-"


@contextmanager
def served(tmp_path: Path, *extra: str, token: str = TOKEN) -> Iterator[tuple[str, str, Path]]:
    """``tracker serve`` with ``token`` in a 0600 file; yields (API URL, metrics URL, log)."""
    db = make_rail(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    log = tmp_path / "serve.log"
    args = ["tracker", "serve", "--tracker", f"sqlite://{db}", "--port", "0"]
    args += ["--token-file", str(token_file), "--metrics-listen", "127.0.0.1:0", *extra]
    with process(args, log) as url:
        metrics = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", log.read_text())
        assert metrics
        yield url, metrics.group(1), log


def _from(address: str) -> httpx.Client:
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 is loopback)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_wrong_tokens_are_throttled_and_logged_per_address(tmp_path: Path) -> None:
    with served(tmp_path) as (url, metrics, log), _from("127.0.0.1") as http:
        for i in range(10):
            bad = {"Authorization": f"Bearer {WRONG}{i}", "X-Forwarded-For": f"10.0.0.{i}"}
            assert http.get(f"{url}/tasks", headers=bad).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": "10.9.9.9"}
        blocked = http.get(f"{url}/tasks", headers=right)
        assert blocked.status_code == 429, blocked.text  # X-Forwarded-For changes nothing
        assert blocked.json()["error"]["code"] == "too_many_failed_auth"
        assert int(blocked.headers["retry-after"]) >= 1
        # Another address is not held up by this one's guesses.
        with _from("127.0.0.2") as other:
            assert other.get(f"{url}/tasks", headers=right).status_code == 200
            assert other.get(f"{url}/health").status_code == 200
        # The dashboard's login, same rule (its throttle was bypassed with X-Forwarded-For).
        for i in range(10):
            form = {"token": f"{WRONG}{i}"}
            headers = {"X-Forwarded-For": f"10.1.0.{i}"}
            assert http.post(f"{url}/ui/login", data=form, headers=headers).status_code == 401
        late = http.post(f"{url}/ui/login", data={"token": TOKEN}, headers={"X-Forwarded-For": "1"})
        assert late.status_code == 429
        # The metrics port asks for the same token: throttled too.
        for i in range(10):
            bad = {"Authorization": f"Bearer {WRONG}{i}"}
            assert http.get(metrics, headers=bad).status_code == 401
        assert http.get(metrics, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429
        text = log.read_text()
    assert WRONG not in text and TOKEN not in text
    assert "10.0.0." not in text  # the logged address is the peer's, not a header's
    assert text.count("failed authentication (api token) from 127.0.0.1") == 1, text
    assert "10 failed authentications (api token) from 127.0.0.1" in text
    assert "failed authentication (dashboard login) from 127.0.0.1" in text
    assert "failed authentication (metrics token) from 127.0.0.1" in text


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_trusted_proxy_forwards_the_client_address(tmp_path: Path) -> None:
    with (
        served(tmp_path, "--trusted-proxy", "127.0.0.1") as (url, _, log),
        _from("127.0.0.1") as http,
    ):
        for i in range(10):
            bad = {"Authorization": f"Bearer {WRONG}{i}", "X-Forwarded-For": "203.0.113.7"}
            assert http.get(f"{url}/tasks", headers=bad).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        assert (
            http.get(
                f"{url}/tasks", headers={**right, "X-Forwarded-For": "203.0.113.7"}
            ).status_code
            == 429
        )
        assert (
            http.get(
                f"{url}/tasks", headers={**right, "X-Forwarded-For": "203.0.113.8"}
            ).status_code
            == 200
        )
    assert "failed authentication (api token) from 203.0.113.7" in log.read_text()


@pytest.mark.timeout(60)
def test_a_weak_world_readable_token_file_is_warned_about(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text("k\n")
    os.chmod(token_file, 0o644)
    log = tmp_path / "serve.log"
    args = ["tracker", "serve", "--tracker", f"sqlite://{db}", "--port", "0"]
    with process([*args, "--token-file", str(token_file)], log):
        text = log.read_text()
    assert "the api token in" in text and "has 1 characters" in text
    assert f"the token file {token_file} is readable or writable by every local user" in text
    assert "chmod 600" in text
