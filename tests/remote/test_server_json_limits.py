"""The served tracker refuses JSON it cannot keep with 400 naming the limit, never 500.

Deep nesting (``json.loads`` overflows at ~1,000 levels; pydantic cannot serialise past ~256),
``NaN``/``Infinity``/``1e999`` and lone surrogates, on every route that takes a body, over real
HTTP; afterwards every read still answers 200.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.jsonlimits import MAX_JSON_DEPTH, nesting_depth_exceeds
from tracker_client.serve.app import create_app
from tracker_client.serve.body import MAX_BODY_DEPTH

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


def nested(depth: int) -> str:
    """JSON text of ``depth`` nested arrays/objects (alternating), innermost ``1``."""
    return '{"a":[' * (depth // 2) + ("[1]" if depth % 2 else "1") + "]}" * (depth // 2)


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        async with serve_on_port(create_app(tracker)) as url:
            yield url
    finally:
        await tracker.aclose()


async def post(client: httpx.AsyncClient, method: str, path: str, text: str, **kw: Any) -> Any:
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    response = await client.request(
        method, path, content=text.encode("utf-8", "surrogatepass"), headers=headers, **kw
    )
    return response.status_code, response.json() if response.content else None


@pytest.mark.anyio
async def test_deep_and_non_json_values_are_400_on_every_route(base: str) -> None:
    async with httpx.AsyncClient(base_url=base) as client:
        ok = await client.post("/pipelines", json={"name": "p", "definition": PIPELINE})
        pid = ok.json()["id"]

        def task(meta: str) -> str:
            return f'{{"pipeline_id":"{pid}","title":"t","metadata":{meta}}}'

        deep = nested(1000)
        cases = [
            ("POST", "/tasks", task(deep)),
            ("POST", "/tasks", task(nested(100))),
            ("POST", "/tasks", task(nested(MAX_JSON_DEPTH + 1))),  # body fits; the field not
            ("POST", "/tasks/bulk", f'{{"tasks":[{task(deep)}]}}'),
            ("POST", "/pipelines", f'{{"name":"q","definition":{deep}}}'),
            ("POST", "/pipelines", f'{{"name":"q","definition":{nested(MAX_JSON_DEPTH + 1)}}}'),
            ("PUT", "/store/ns/k", f'{{"value":{deep}}}'),
            ("PUT", "/store/ns/k", f'{{"value":{nested(MAX_JSON_DEPTH + 1)}}}'),
            ("POST", "/artifacts", f'{{"kind":"k","uri":"u","meta":{deep}}}'),
            ("POST", "/leases/claim", deep),
        ]
        for method, path, text in cases:
            status, body = await post(client, method, path, text)
            assert status == 400, (path, body)
            assert body["error"]["code"] == "json_too_deep", (path, body)
            assert str(MAX_JSON_DEPTH) in body["error"]["message"], body

        claim = '{"agent_id":"w","agent_role":"coder","concurrency":{"per_state":{"todo":%s}}}'
        shapes = [
            ("POST", "/leases/claim", claim % "NaN"),
            ("POST", "/leases/claim", claim % "Infinity"),
            ("POST", "/leases/claim", claim % "-Infinity"),
            ("POST", "/leases/claim", claim % "1e999"),
            ("POST", "/tasks", f'{{"pipeline_id":"{pid}","title":"\\ud800"}}'),
            ("POST", "/tasks", f'{{"pipeline_id":"{pid}","title":"\ud800"}}'),  # raw bytes
            ("POST", "/tasks", task('{"\\udc00":1}')),
            ("PUT", "/store/ns/k", '{"value":"\\udfff x"}'),
            ("PUT", "/store/ns/k", '{"value":NaN}'),
        ]
        for method, path, text in shapes:
            status, body = await post(client, method, path, text)
            assert status == 400, (path, text, body)
            assert body["error"]["code"] == "invalid_json", (path, text, body)

        # Event data on a lease route: the same limits, once the lease is checked.
        assert (await post(client, "POST", "/tasks", task("{}")))[0] == 201
        claim_body = {"agent_id": "w", "agent_role": "coder", "lease_ttl_ms": 60_000}
        lease = (await client.post("/leases/claim", json=claim_body)).json()
        auth = {"Authorization": f"Bearer {lease['lease_token']}"}
        events = f"/runs/{lease['run']['id']}/events"
        for data in (deep, nested(MAX_JSON_DEPTH + 1)):
            status, body = await post(
                client, "POST", events, f'{{"kind":"k","data":{data}}}', headers=auth
            )
            assert (status, body["error"]["code"]) == (400, "json_too_deep"), body
        status, body = await post(client, "POST", events, '{"kind":"k","data":NaN}', headers=auth)
        assert (status, body["error"]["code"]) == (400, "invalid_json"), body
        ok = await post(
            client, "POST", events, f'{{"kind":"k","data":{nested(MAX_JSON_DEPTH)}}}', headers=auth
        )
        assert ok[0] == 201, ok
        listed = await client.get(events)
        assert listed.status_code == 200 and len(listed.json()["items"]) == 1
        done = await client.post(
            f"/runs/{lease['run']['id']}/transition", headers=auth, json={"trigger": "complete"}
        )
        assert done.status_code == 200, done.text

        # What fits is kept and read back, and every list still answers.
        fits = await post(client, "POST", "/tasks", task(nested(MAX_JSON_DEPTH)))
        assert fits[0] == 201, fits
        pair = await post(client, "PUT", "/store/ns/emoji", '{"value":"\\ud83d\\ude00"}')
        assert pair[0] == 204, pair
        assert (await client.get("/store/ns/emoji")).json()["value"] == "\U0001f600"
        escaped = await post(client, "PUT", "/store/ns/text", '{"value":"\\\\ud800"}')
        assert escaped[0] == 204, escaped  # a backslash and "ud800": no surrogate at all
        for path in ("/tasks", "/pipelines", "/store/ns", "/artifacts", "/health"):
            assert (await client.get(path)).status_code == 200, path
        stored = (await client.get("/tasks")).json()["items"]
        depths = [json.dumps(t["metadata"]).count("[") for t in stored]
        assert depths == [0, MAX_JSON_DEPTH // 2]


def test_depth_scan_matches_the_parsed_depth() -> None:
    """The raw-bytes scan agrees with the depth of the parsed document, strings included."""

    def depth(value: Any) -> int:
        if isinstance(value, dict):
            return 1 + max((depth(v) for v in value.values()), default=0)
        if isinstance(value, list):
            return 1 + max((depth(v) for v in value), default=0)
        return 0

    samples = [nested(d) for d in range(0, 80)]
    samples += [f'[{nested(d)}, "[[[[{{{{\\"", [[], {{}}], {nested(d // 2)}]' for d in range(70)]
    samples += ['"' + "[" * 500 + '"', "[" + "[]," * 300 + "[]]"]
    # Strings of brackets, quotes and backslashes, empty and side by side, around real nesting.
    pieces = ["", "[", "]{", '"', "\\", '\\"[', "{}", "a"]
    rng = random.Random(31)
    for d in range(0, 90, 3):
        keys = ["".join(rng.choices(pieces, k=rng.randrange(4))) for _ in range(6)]
        doc = {k: [rng.choice(keys), {"": k}] for k in keys}
        samples.append(json.dumps({**doc, "n": json.loads(nested(d)), "m": [doc, [""] * d]}))
    for text in samples:
        actual = depth(json.loads(text))
        for limit in (actual - 1, actual, MAX_BODY_DEPTH):
            if limit >= 0:
                assert nesting_depth_exceeds(text.encode(), limit) == (actual > limit), text
