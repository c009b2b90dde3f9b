"""A small in-memory imitation of the real NullTickets server, *with its traps*, for MockTransport.

The served tracker (``backlog-worker tracker serve``) fixes the traps, so the client's handling of
them can only be tested against something that reproduces them (docs/guarantees/nulltickets.md):

* requests over 65,536 bytes get no answer (the connection is reset);
* chunked bodies are refused (400 invalid_json);
* every response says ``Connection: close``;
* idempotency records keep *every* status < 500, 204s included, and replay before lease checks;
* list cursors point at the first row of the next page but are treated as exclusive (skip);
* heartbeat resets the lease to now + 300 s;
* unknown artifact task/run ids give 500;
* two store errors have invalid JSON bodies;
* admin token on admin routes, lease token on lease routes, the admin token refused there.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx

LIMIT = 65_536


def _now() -> int:
    return int(time.time() * 1000)


def _resp(status: int, body: Any = None, raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    return httpx.Response(
        status,
        content=content,
        headers={"Content-Type": "application/json", "Connection": "close"},
    )


def _err(status: int, code: str, message: str) -> httpx.Response:
    return _resp(status, {"error": {"code": code, "message": message}})


@dataclass
class FakeNullTickets:
    """State and handler. ``requests`` records every request that reached the server."""

    api_token: str | None = None
    requests: list[httpx.Request] = field(default_factory=list)
    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    idem: dict[tuple[str, str, str], tuple[str, int, bytes]] = field(default_factory=dict)
    #: Raise a reset for the next N requests (after recording them).
    resets: int = 0
    #: path -> N: handle the next N requests to that path, then lose the answer (reset).
    lose_answers: dict[str, int] = field(default_factory=dict)
    #: Answer 500 to the next N requests.
    unavailable: int = 0
    _clock: int = 0

    def transport(self) -> httpx.MockTransport:
        """A MockTransport serving this fake."""
        return httpx.MockTransport(self.handle)

    def _tick(self) -> int:
        # Distinct, increasing ms per object so ordering is deterministic.
        self._clock = max(self._clock + 1, _now())
        return self._clock

    # -- plumbing -----------------------------------------------------------------------------
    def handle(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        size = len(request.method) + len(request.url.raw_path) + 11
        size += sum(len(k) + len(v) + 4 for k, v in request.headers.raw) + 2 + len(body)
        self.requests.append(request)
        if size > LIMIT:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        if self.resets > 0:
            self.resets -= 1
            raise httpx.ReadError("[Errno 104] Connection reset by peer")
        if self.unavailable > 0:
            self.unavailable -= 1
            return _err(500, "internal_error", "database is locked")
        if "chunked" in request.headers.get("transfer-encoding", ""):
            return _err(400, "invalid_json", "Invalid JSON body")
        segments = [
            unquote(s) for s in request.url.raw_path.split(b"?")[0].decode().split("/") if s
        ]
        query = dict(
            p.split("=", 1) for p in request.url.query.decode().split("&") if "=" in p
        )  # NOT percent-decoded, like the real server
        lease_class = len(segments) == 3 and (
            (segments[0] == "leases" and segments[2] == "heartbeat")
            or (segments[0] == "runs" and segments[2] in ("events", "transition", "fail"))
        )
        auth = request.headers.get("authorization", "")
        public = segments in (["health"], ["openapi.json"])
        if lease_class:
            if not auth.startswith("Bearer "):
                return _err(401, "unauthorized", "Missing Authorization header")
        elif not public and self.api_token is not None and auth != f"Bearer {self.api_token}":
            return _err(401, "unauthorized", "Missing or invalid Authorization header")
        key = request.headers.get("idempotency-key")
        path = request.url.raw_path.split(b"?")[0].decode()
        if key and request.method in ("POST", "PUT", "DELETE"):
            digest = hashlib.sha256(body).hexdigest()
            stored = self.idem.get((key, request.method, path))
            if stored is not None:
                if stored[0] != digest:
                    return _err(409, "idempotency_conflict", "Idempotency key reused")
                return _resp(stored[1], raw=stored[2])
        response = self.route(request.method, segments, query, body, auth)
        if key and request.method in ("POST", "PUT", "DELETE") and response.status_code < 500:
            self.idem[(key, request.method, path)] = (
                hashlib.sha256(body).hexdigest(),
                response.status_code,
                response.content,
            )
        if self.lose_answers.get(path, 0) > 0:
            self.lose_answers[path] -= 1
            raise httpx.ReadError("[Errno 104] Connection reset by peer (after commit)")
        return response

    def route(
        self, method: str, seg: list[str], query: dict[str, str], body: bytes, auth: str
    ) -> httpx.Response:
        """Dispatch to a handler (a subset of the real routes)."""
        doc: Any = json.loads(body) if body else None
        match method, seg:
            case "GET", ["health"]:
                return _resp(
                    200,
                    {
                        "status": "ok",
                        "version": "2026.3.2",
                        "tasks_by_stage": [],
                        "active_leases": len(self.leases),
                    },
                )
            case "POST", ["pipelines"]:
                pid = str(uuid.uuid4())
                self.pipelines[pid] = {
                    "id": pid,
                    "name": doc["name"],
                    "definition": doc["definition"],
                    "created_at_ms": self._tick(),
                }
                return _resp(201, {"id": pid})
            case "GET", ["pipelines", pid]:
                if pid not in self.pipelines:
                    return _err(404, "not_found", "Pipeline not found")
                return _resp(200, self.pipelines[pid])
            case "POST", ["tasks"]:
                return self._create([doc], bulk=False)
            case "POST", ["tasks", "bulk"]:
                if not doc["tasks"]:
                    return _err(400, "invalid_request", "tasks must not be empty")
                return self._create(doc["tasks"], bulk=True)
            case "GET", ["tasks"]:
                items = sorted(self.tasks.values(), key=lambda t: (t["created_at_ms"], t["id"]))
                return self._page(
                    items,
                    query,
                    lambda t: f"{t['created_at_ms']}:{t['id']}",
                    lambda t: (t["created_at_ms"], t["id"]),
                    _task_key,
                )
            case "GET", ["tasks", tid]:
                if tid not in self.tasks:
                    return _err(404, "not_found", "Task not found")
                return _resp(200, self._detail(tid))
            case "POST", ["leases", "claim"]:
                return self._claim(doc)
            case "POST", ["leases", lid, "heartbeat"]:
                lease = self.leases.get(lid)
                if lease is None:
                    return _err(404, "not_found", "Lease not found")
                if auth != f"Bearer {lease['token']}":
                    return _err(401, "unauthorized", "Invalid token")
                if lease["expires_at_ms"] <= _now():
                    return _err(410, "expired", "Lease expired")
                lease["expires_at_ms"] = _now() + 300_000
                return _resp(200, {"expires_at_ms": lease["expires_at_ms"]})
            case "POST", ["runs", rid, action]:
                return self._run_write(rid, action, doc, auth)
            case "GET", ["runs", rid, "events"]:
                items = [e for e in self.events if e["run_id"] == rid]
                return self._page(items, query, lambda e: str(e["id"]), lambda e: e["id"], int)
            case "POST", ["artifacts"]:
                if doc.get("task_id") and doc["task_id"] not in self.tasks:
                    return _err(500, "internal_error", "Internal server error")
                if doc.get("run_id") and doc["run_id"] not in self.runs:
                    return _err(500, "internal_error", "Internal server error")
                art = {
                    "id": str(uuid.uuid4()),
                    "created_at_ms": self._tick(),
                    "task_id": None,
                    "run_id": None,
                    "sha256": None,
                    "size_bytes": None,
                    "meta": None,
                    **doc,
                }
                self.artifacts.append(art)
                return _resp(201, {"id": art["id"]})
            case "GET", ["artifacts"]:
                items = [a for a in self.artifacts if query.get("task_id") in (None, a["task_id"])]
                return self._page(
                    items,
                    query,
                    lambda a: f"{a['created_at_ms']}:{a['id']}",
                    lambda a: (a["created_at_ms"], a["id"]),
                    _task_key,
                )
            case "PUT", ["store", "search", _key]:
                return _resp(
                    400,
                    raw=b'{"error":{"code":"reserved_namespace","message":""search" '
                    b'is a reserved namespace name"}}',
                )
            case "PUT", ["store", _ns, _key]:
                if not isinstance(doc, dict) or "value" not in doc:
                    return _resp(
                        400,
                        raw=b'{"error":{"code":"invalid_json","message":"Invalid JSON '
                        b'body; expected {"value": ...}"}}',
                    )
                return _resp(204)
        return _err(404, "not_found", "Not found")

    # -- handlers -----------------------------------------------------------------------------
    def _create(self, items: list[dict[str, Any]], bulk: bool) -> httpx.Response:
        for item in items:
            if item["pipeline_id"] not in self.pipelines:
                return _err(404, "pipeline_not_found", "Pipeline not found")
        ids = []
        for item in items:
            pipe = self.pipelines[item["pipeline_id"]]
            policy = item.get("retry_policy") or {}
            now = self._tick()
            tid = str(uuid.uuid4())
            self.tasks[tid] = {
                "id": tid,
                "pipeline_id": pipe["id"],
                "stage": pipe["definition"]["initial"],
                "title": item["title"],
                "description": item["description"],
                "priority": item.get("priority", 0),
                "metadata": item.get("metadata", {}),
                "task_version": 1,
                "next_eligible_at_ms": 0,
                "retry_delay_ms": policy.get("retry_delay_ms", 0),
                "max_attempts": policy.get("max_attempts"),
                "dead_letter_stage": policy.get("dead_letter_stage"),
                "dead_letter_reason": None,
                "created_at_ms": now,
                "updated_at_ms": now,
            }
            ids.append(tid)
        return _resp(201, {"ids": ids} if bulk else {"id": ids[0]})

    def _detail(self, tid: str) -> dict[str, Any]:
        task = dict(self.tasks[tid])
        runs = sorted(
            (r for r in self.runs.values() if r["task_id"] == tid), key=lambda r: r["attempt"]
        )
        if runs:
            task["latest_run"] = runs[-1]
        definition = self.pipelines[task["pipeline_id"]]["definition"]
        task["dependencies"] = []
        task["assignments"] = []
        task["available_transitions"] = [
            {"trigger": t["trigger"], "to": t["to"], "required_gates": []}
            for t in definition["transitions"]
            if t["from"] == task["stage"]
        ]
        return task

    def _page(self, items, query, cursor_of, key_of, parse) -> httpx.Response:
        limit = int(query.get("limit", "50"))
        cursor = query.get("cursor")
        if cursor is not None:
            try:
                after = parse(cursor)
            except ValueError:
                return _err(400, "invalid_cursor", "Invalid cursor")
            items = [i for i in items if key_of(i) > after]
        page, rest = items[:limit], items[limit:]
        # The bug: the cursor is the *first row of the next page*, treated as exclusive.
        return _resp(200, {"items": page, "next_cursor": cursor_of(rest[0]) if rest else None})

    def _claim(self, doc: dict[str, Any]) -> httpx.Response:
        now = _now()
        for tid, task in sorted(self.tasks.items(), key=lambda kv: kv[1]["created_at_ms"]):
            state = self.pipelines[task["pipeline_id"]]["definition"]["states"][task["stage"]]
            busy = any(
                lease["task_id"] == tid and lease["expires_at_ms"] > now
                for lease in self.leases.values()
            )
            if (
                state.get("agent_role") != doc["agent_role"]
                or busy
                or task["dead_letter_reason"]
                or task["next_eligible_at_ms"] > now
            ):
                continue
            attempt = 1 + max(
                (r["attempt"] for r in self.runs.values() if r["task_id"] == tid), default=0
            )
            rid, lid, token = str(uuid.uuid4()), str(uuid.uuid4()), secrets.token_hex(32)
            run = {
                "id": rid,
                "task_id": tid,
                "attempt": attempt,
                "status": "running",
                "agent_id": doc["agent_id"],
                "agent_role": doc["agent_role"],
                "started_at_ms": now,
                "ended_at_ms": None,
            }
            self.runs[rid] = run
            expires = now + int(doc.get("lease_ttl_ms", 300_000))
            self.leases[lid] = {
                "task_id": tid,
                "run_id": rid,
                "token": token,
                "expires_at_ms": expires,
            }
            return _resp(
                200,
                {
                    "task": task,
                    "run": run,
                    "lease_id": lid,
                    "lease_token": token,
                    "expires_at_ms": expires,
                },
            )
        return _resp(204)

    def _run_write(self, rid: str, action: str, doc: Any, auth: str) -> httpx.Response:
        found = [(lid, le) for lid, le in self.leases.items() if le["run_id"] == rid]
        if not found:
            return _err(404, "not_found", "No active lease for this run")
        lid, lease = found[0]
        if auth != f"Bearer {lease['token']}":
            return _err(401, "unauthorized", "Invalid token")
        if lease["expires_at_ms"] <= _now():
            return _err(410, "expired", "Lease expired")
        task = self.tasks[lease["task_id"]]
        run = self.runs[rid]
        if action == "events":
            event = {
                "id": len(self.events) + 1,
                "run_id": rid,
                "ts_ms": self._tick(),
                "kind": doc["kind"],
                "data": doc.get("data", {}),
            }
            self.events.append(event)
            return _resp(201, {"id": event["id"]})
        if action == "transition":
            definition = self.pipelines[task["pipeline_id"]]["definition"]
            if doc.get("expected_stage") not in (None, task["stage"]):
                return _err(409, "expected_stage_mismatch", "Stage mismatch")
            match = [
                t
                for t in definition["transitions"]
                if t["from"] == task["stage"] and t["trigger"] == doc["trigger"]
            ]
            if not match:
                return _err(400, "invalid_transition", "Invalid transition")
            previous = task["stage"]
            task.update(stage=match[0]["to"], task_version=task["task_version"] + 1)
            run.update(status="completed", ended_at_ms=_now())
            del self.leases[lid]
            return _resp(
                200,
                {"previous_stage": previous, "new_stage": task["stage"], "trigger": doc["trigger"]},
            )
        if action == "fail":
            run.update(status="failed", ended_at_ms=_now())
            del self.leases[lid]
            failed = sum(
                1
                for r in self.runs.values()
                if r["task_id"] == task["id"] and r["status"] == "failed"
            )
            if task["max_attempts"] is not None and failed >= task["max_attempts"]:
                task.update(
                    dead_letter_reason="max_attempts_exceeded",
                    next_eligible_at_ms=9223372036854775000,
                )
            else:
                task["next_eligible_at_ms"] = _now() + task["retry_delay_ms"]
            return _resp(200, {"status": "failed"})
        return _err(404, "not_found", "Not found")


def _task_key(cursor: str) -> tuple[int, str]:
    ms, _, tid = cursor.partition(":")
    if not tid:
        raise ValueError(cursor)
    return int(ms), tid


PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
