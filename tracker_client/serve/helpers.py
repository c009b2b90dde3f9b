"""Small helpers shared by the served tracker's route handlers: the tracker of a request, query
parameters, the lease handle of a lease route (checked before its body is read), store paths,
long polls that end when the server stops or the client leaves.

May touch the embedded tracker's lease check (the early refusal of :func:`checked_lease`);
everything else goes through the ``Tracker`` protocol."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import unquote

import anyio
from pydantic import BaseModel, SecretStr
from starlette.requests import Request

from tracker_client.capabilities import LeaseHandle
from tracker_client.errors import LeaseLost
from tracker_client.models import Lease
from tracker_client.protocol import Tracker
from tracker_client.rules.common import Ctx
from tracker_client.rules.rail import Rail
from tracker_client.rules.runs import check_lease, token_hash
from tracker_client.serve.http import ApiError, bearer

__all__ = [
    "Closing",
    "checked_lease",
    "dump",
    "idem_key",
    "int_query",
    "lease_handle",
    "lease_json",
    "limit_query",
    "model_json",
    "page_json",
    "store_path",
    "tracker_of",
    "until_closing",
]

T = TypeVar("T")


class Closing:
    """Set once the server stops: long polls (wait-for-work, task wait) answer at once instead
    of holding up a stop for their whole timeout (an idle worker's poll lasts up to 25 s)."""

    def __init__(self) -> None:
        self.closed = False
        self._event: anyio.Event | None = None  # made on first wait: needs a running loop

    def set(self) -> None:
        """Answer every long poll now, and any that starts later at once."""
        self.closed = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once :meth:`set` was called."""
        if self.closed:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


async def until_closing(request: Request, wait: Callable[[], Awaitable[T]]) -> T | None:
    """Run the long poll ``wait``; None when the server started stopping first, or the client
    went away (nobody would read the answer, and an abandoned poll would hold up a stop).

    The poll's own error (an unknown task: ``NotFound``) is raised as is, not wrapped in a
    task group's exception group, so the route answers it as usual.
    """
    closing: Closing = request.app.state.closing
    if closing.closed:
        return None
    result: T | None = None
    error: Exception | None = None
    async with anyio.create_task_group() as tg:

        async def poll() -> None:
            nonlocal result, error
            try:
                result = await wait()
            except Exception as exc:
                error = exc
            tg.cancel_scope.cancel()

        async def client_gone() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass  # the (empty) body of the GET; the next message comes when it disconnects
            tg.cancel_scope.cancel()

        tg.start_soon(poll)
        tg.start_soon(client_gone)
        await closing.wait()
        tg.cancel_scope.cancel()
    if error is not None:
        raise error
    return result


def tracker_of(request: Request) -> Tracker:
    """The tracker the application serves."""
    tracker: Tracker = request.app.state.tracker
    return tracker


def idem_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header (the tracker's ``idempotency_key``), or None."""
    return request.headers.get("idempotency-key") or None


def int_query(request: Request, name: str, default: int, code: str = "invalid_request") -> int:
    """An integer query parameter (``default`` when absent or empty; else 400 ``code``)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ApiError(400, code, f"query parameter {name}={raw!r} is not an integer") from exc


def limit_query(request: Request, default: int) -> int:
    """The ``limit`` query parameter (a non-integer is 400 ``invalid_limit``)."""
    return int_query(request, "limit", default, "invalid_limit")


def lease_handle(request: Request, *, lease_id: str = "", run_id: str = "") -> LeaseHandle:
    """The lease reference of a lease route: the path id and the Bearer value (the tracker
    checks the token against the lease). The task is not known here, and not needed."""
    token = bearer(request)
    if token is None:  # the auth middleware already refused this
        raise ApiError(401, "unauthorized", "Missing Authorization header")
    return LeaseHandle(lease_id=lease_id, run_id=run_id, lease_token=SecretStr(token))


async def checked_lease(request: Request, run_id: str, operation: str) -> LeaseHandle:
    """The lease handle of run ``run_id``, checked against the tracker *before* the body is read.

    A wrong token, an unknown run or a gone lease is answered (401/404/410) without reading a
    byte of the body: otherwise any Bearer value could make the server buffer and parse a
    16 MiB body. The write re-checks the lease in its own transaction; this read only refuses
    early. One exception: a gone lease with an ``Idempotency-Key`` already recorded for
    ``operation`` is let through, since that is a retry whose answer was lost, and the write
    replays the answer it recorded (or refuses with a conflict). Trackers other than the
    embedded one are not pre-checked.
    """
    lease = lease_handle(request, run_id=run_id)
    tracker = tracker_of(request)
    if not isinstance(tracker, Rail):
        return lease
    digest = token_hash(lease.lease_token.get_secret_value())
    key = idem_key(request)

    def precheck(ctx: Ctx) -> None:
        try:
            check_lease(ctx, run_id, digest)
        except LeaseLost as exc:
            if key is None or exc.code == "invalid_token":
                raise
            recorded = ctx.scalar("idempotency.recorded", (key, operation))
            if recorded is None:
                raise

    # Rail._read: one read-only job on the database thread, as every read is.
    await tracker._read("check_lease", precheck)
    return lease


def store_path(request: Request) -> tuple[str, str]:
    """(namespace, key) from the raw path, each segment percent-decoded on its own.

    ``/store/team%20a/key%2F1`` is namespace ``team a``, key ``key/1`` (as NullTickets reads it);
    the decoded path would have split the key at its ``/``.
    """
    raw = request.scope.get("raw_path") or request.url.path.encode()
    parts = [unquote(p) for p in raw.split(b"?")[0].decode("latin-1").split("/") if p]
    if len(parts) != 3:
        raise ApiError(404, "not_found", "Not found")
    return parts[1], parts[2]


def dump(model: BaseModel) -> Any:
    """The model as JSON-ready data."""
    return model.model_dump(mode="json")


def lease_json(lease: Lease) -> bytes:
    """A lease as JSON text in one pass, its token (masked in the model's own JSON) in clear:
    the answer of a claim."""
    text = lease.model_dump_json(exclude={"lease_token"}).encode()
    token = json.dumps(lease.lease_token.get_secret_value()).encode()
    return text[:-1] + b',"lease_token":' + token + b"}"


def model_json(model: BaseModel) -> bytes:
    """The model as compact JSON text (the same document :func:`dump` gives, encoded)."""
    return model.model_dump_json().encode()


def page_json(page: Any) -> Any:
    """A page as ``{"items": [...], "next_cursor"}``."""
    return {"items": [dump(i) for i in page.items], "next_cursor": page.next_cursor}
