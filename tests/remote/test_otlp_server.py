"""OTLP ingest over real HTTP on 127.0.0.1: ``POST /v1/traces`` and ``POST /otlp/v1/traces``.

Content-type dispatch as NullTickets does it (JSON parsed, anything else a blob), gzip, the
admin token, the OpenAPI entries; and bad input: every malformed or misshapen body is 400 naming
what is wrong, a body over the OTLP limit is 413, and neither stores anything (the rail's
``span_batches`` table is read back to be sure). Then a real ``tracker serve --max-otlp-bytes``
process.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.contract.otlpdocs import document, span
from tests.contract.support import FakeClock
from tests.remote.fixtures import serve_on_port, wait_listening
from tracker_client.embedded import EmbeddedTracker
from tracker_client.serve.app import create_app
from tracker_client.serve.otlp import DEFAULT_MAX_OTLP_BYTES

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATHS = ("/v1/traces", "/otlp/v1/traces")
TOKEN = "otlp-admin-token-0123"
LIMIT = 64 * 1024
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
ONE = document(span(0, "e2e.ingest", task="task-e2e", run="run-e2e"))


class Rail:
    """A served rail and the way to read its span tables back."""

    def __init__(self, db: Path, url: str, clock: FakeClock) -> None:
        self.db, self.url, self.clock = db, url, clock

    def batches(self) -> list[tuple[str, str, bytes | None, int]]:
        """Every stored batch: (content type, stored, blob, accepted)."""
        conn = sqlite3.connect(self.db)
        try:
            rows = conn.execute(
                "SELECT content_type, stored, blob, accepted FROM span_batches ORDER BY id"
            ).fetchall()
        finally:
            conn.close()
        return [(str(a), str(b), c, int(d)) for a, b, c, d in rows]


@pytest.fixture
async def rail(tmp_path: Path) -> AsyncIterator[Rail]:
    clock = FakeClock()
    db = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(db), clock=clock)
    try:
        app = create_app(tracker, api_token=TOKEN, max_otlp_bytes=LIMIT)
        async with serve_on_port(app) as url:
            yield Rail(db, url, clock)
    finally:
        await tracker.aclose()


@pytest.fixture
async def http(rail: Rail) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=rail.url, headers=AUTH, timeout=30) as client:
        yield client


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()


async def test_json_is_parsed_and_any_other_content_type_is_a_blob_on_both_paths(
    rail: Rail, http: httpx.AsyncClient
) -> None:
    for n, path in enumerate(PATHS):
        for content_type in ("application/json", "application/json; charset=utf-8", "Text/x"):
            is_json = content_type.lower().startswith("application/json")
            headers = {"Content-Type": content_type}
            body = _json(ONE) if is_json else b"\x0a\x03abc"
            answer = await http.post(path, content=body, headers=headers)
            assert answer.status_code == 200, answer.text
            got = answer.json()
            assert set(got) == {"batch_id", "accepted_spans", "stored"}
            assert (got["accepted_spans"], got["stored"]) == (
                (1, "json") if is_json else (0, "blob")
            )
        protobuf = await http.post(
            path, content=b"abc", headers={"Content-Type": "application/x-protobuf"}
        )
        assert protobuf.json() == {"batch_id": 4 * n + 4, "accepted_spans": 0, "stored": "blob"}
    bare = await http.post("/v1/traces", content=b"raw")  # no content type at all: a blob
    assert bare.json()["stored"] == "blob"
    stored = rail.batches()
    assert [b[1] for b in stored] == ["json", "json", "blob", "blob"] * 2 + ["blob"]
    assert stored[3] == ("application/x-protobuf", "blob", b"abc", 0)
    assert stored[2] == ("Text/x", "blob", b"\x0a\x03abc", 0)
    assert stored[-1] == ("application/octet-stream", "blob", b"raw", 0)
    spans = (await http.get("/tasks/task-e2e/spans")).json()
    assert len(spans) == 4 and {s["run_id"] for s in spans} == {"run-e2e"}
    assert (await http.get("/tasks/task-e2e/spans", params={"run_id": "other"})).json() == []


async def test_gzip_bodies_are_decoded_and_other_encodings_refused(
    rail: Rail, http: httpx.AsyncClient
) -> None:
    zipped = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    ok = await http.post("/v1/traces", content=gzip.compress(_json(ONE)), headers=zipped)
    assert ok.json()["accepted_spans"] == 1
    blob = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    await http.post("/otlp/v1/traces", content=gzip.compress(b"proto"), headers=blob)
    assert [b[2] for b in rail.batches()] == [None, b"proto"]  # kept decoded
    broken = await http.post("/v1/traces", content=b"\x1f\x8bnot gzip", headers=zipped)
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_gzip"
    cut = await http.post("/v1/traces", content=gzip.compress(_json(ONE))[:-12], headers=zipped)
    assert cut.status_code == 400 and "truncated" in cut.json()["error"]["message"]
    other = await http.post(
        "/v1/traces", content=b"x", headers={**zipped, "Content-Encoding": "br"}
    )
    assert other.status_code == 415 and "'br'" in other.json()["error"]["message"]
    assert len(rail.batches()) == 2


def _nested(depth: int) -> bytes:
    return b'{"a":[' * (depth // 2) + b"1" + b"]}" * (depth // 2)


BAD_BODIES = [
    ("not-json", b"{bad", "invalid_json", "Invalid JSON body"),
    ("empty", b"", "invalid_json", "the body is empty"),
    ("array", b"[]", "invalid_otlp", "expected a JSON object"),
    ("nan", b'{"resourceSpans": [], "x": NaN}', "invalid_json", "NaN is not JSON"),
    ("too-deep", _nested(2000), "json_too_deep", "nested too deep"),
    ("resourceSpans-object", b'{"resourceSpans": {}}', "invalid_otlp", "expected an array"),
    (
        "no-traceId",
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"0123456789abcdef","name":"x"}]}]}]}',
        "invalid_otlp",
        "resourceSpans[0].scopeSpans[0].spans[0].traceId: required",
    ),
    (
        "bad-hex",
        _json(document({**span(0, "x"), "spanId": "0123"})),
        "invalid_otlp",
        "spanId: expected 16 hex digits",
    ),
    (
        "no-name",
        _json(document({k: v for k, v in span(0, "x").items() if k != "name"})),
        "invalid_otlp",
        "spans[0].name: required",
    ),
]


@pytest.mark.parametrize(
    ("body", "code", "named"), [pytest.param(b, c, n, id=i) for i, b, c, n in BAD_BODIES]
)
async def test_a_bad_json_body_is_400_naming_what_is_wrong_and_stores_nothing(
    rail: Rail, http: httpx.AsyncClient, body: bytes, code: str, named: str
) -> None:
    for path in PATHS:
        answer = await http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == code and named in error["message"], error
    assert rail.batches() == []


async def test_a_body_over_the_otlp_limit_is_413_and_stores_nothing(
    rail: Rail, http: httpx.AsyncClient
) -> None:
    big = b"x" * (LIMIT + 1)
    for path in PATHS:
        declared = await http.post(path, content=big, headers={"Content-Type": "x/y"})
        assert declared.status_code == 413, declared.text
        assert f"over {LIMIT} bytes" in declared.json()["error"]["message"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        for _ in range(LIMIT // 1024 + 1):
            yield b" " * 1024

    async with httpx.AsyncClient(base_url=rail.url, headers=AUTH) as streaming:
        streamed = await streaming.post(
            "/v1/traces", content=chunks(), headers={"Content-Type": "application/json"}
        )
    assert streamed.status_code == 413
    bomb = gzip.compress(b" " * (LIMIT * 4))  # small on the wire, over the limit decoded
    assert len(bomb) < LIMIT
    zipped = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    inflated = await http.post("/v1/traces", content=bomb, headers=zipped)
    assert inflated.status_code == 413 and "decompressed" in inflated.json()["error"]["message"]
    assert rail.batches() == []
    exact = _json(ONE)
    exact += b" " * (LIMIT - len(exact))  # exactly the limit is accepted
    plain = {"Content-Type": "application/json"}
    assert (await http.post("/v1/traces", content=exact, headers=plain)).status_code == 200


async def test_the_default_limit_takes_thousands_of_spans_and_refuses_over_4_mib(
    tmp_path: Path,
) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "big.db"))
    try:
        async with (
            serve_on_port(create_app(tracker)) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as client,
        ):
            many = document(*(span(n, f"s{n}", task="big") for n in range(3000)))
            body = _json(many)
            assert 1024 * 1024 < len(body) < DEFAULT_MAX_OTLP_BYTES  # parsed off the loop
            answer = await client.post("/v1/traces", content=body, headers=JSON)
            assert answer.json()["accepted_spans"] == 3000
            over = b" " * (DEFAULT_MAX_OTLP_BYTES + 1)  # under the 16 MiB request limit
            assert (await client.post("/v1/traces", content=over, headers=JSON)).status_code == 413
            listed = (await client.get("/tasks/big/spans", params={"limit": 1000})).json()
            assert len(listed) == 1000 and listed[0]["name"] == "s0"
    finally:
        await tracker.aclose()


async def test_the_routes_need_the_admin_token(rail: Rail) -> None:
    async with httpx.AsyncClient(base_url=rail.url) as anonymous:
        for path in PATHS:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                answer = await anonymous.post(path, json=ONE, headers=headers)
                assert answer.status_code == 401, (path, headers)
                assert answer.json()["error"]["code"] == "unauthorized"
        listing = await anonymous.get("/tasks/task-e2e/spans")
        assert listing.status_code == 401
        assert (await anonymous.post("/v1/traces", json=ONE, headers=AUTH)).status_code == 200
    assert len(rail.batches()) == 1


async def test_openapi_and_health_show_the_otlp_routes(http: httpx.AsyncClient) -> None:
    doc = (await http.get("/openapi.json")).json()
    for path in PATHS:
        post = doc["paths"][path]["post"]
        assert post["x-auth"] == "admin" and "x-extension" not in post  # plain NullTickets
        assert set(post["requestBody"]["content"]) == {"application/json", "application/x-protobuf"}
        assert {"200", "400", "401", "413"} <= set(post["responses"])
    spans = doc["paths"]["/tasks/{task_id}/spans"]["get"]
    assert spans["x-extension"] == "spans"
    assert "spans" in (await http.get("/health")).json()["extensions"]


async def test_blobs_and_unlinked_spans_go_after_the_retention(
    rail: Rail, http: httpx.AsyncClient
) -> None:
    await http.post("/otlp/v1/traces", content=b"old", headers={"Content-Type": "x/protobuf"})
    await http.post("/v1/traces", json=ONE)
    rail.clock.advance(2 * 86_400_000)
    await http.post("/otlp/v1/traces", content=b"new", headers={"Content-Type": "x/protobuf"})
    purged = await http.post("/ops/purge", json={"older_than_ms": 86_400_000})
    assert purged.status_code == 200
    assert rail.batches() == [("x/protobuf", "blob", b"new", 0)]
    assert (await http.get("/tasks/task-e2e/spans")).json() == []


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_tracker_serve_takes_max_otlp_bytes(tmp_path: Path) -> None:
    await (await EmbeddedTracker.open(str(tmp_path / "rail.db"))).aclose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "worker", "tracker", "serve", "--port", "0"]
    command += ["--tracker", f"sqlite://{tmp_path / 'rail.db'}", "--max-otlp-bytes", "2048"]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        url = wait_listening(log, proc)
        async with httpx.AsyncClient(base_url=url) as client:
            small = await client.post("/v1/traces", json=ONE)
            assert small.json()["accepted_spans"] == 1
            large = await client.post("/otlp/v1/traces", content=b"p" * 2049)
            assert large.status_code == 413
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
