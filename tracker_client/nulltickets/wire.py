"""One operation of the contract table, carried out: the request it makes and the answer it reads.

:class:`Wire` takes an operation's name (a row of :data:`~tracker_client.contract.table.
OPERATIONS`), its path parameters, query and body, and derives the rest from the table: method,
path template, credentials (``auth``), whether the server must list an extension first, and the
model the success answer validates as. The client's parts (:mod:`.client`, :mod:`.leases`,
:mod:`.tasks`, :mod:`.waiting`) say only what is particular to an operation.

The rules kept here, for every operation alike:

* the first request of a client reads ``GET /health`` (:class:`~.discovery.Discovery`);
* an extension operation on a server that does not list it is ``Unsupported`` before anything is
  sent;
* idempotency keys: an ``idempotent`` operation of the table carries the caller's key for the
  logical write or a fresh UUID, reused by the retries of that call only (so a retry after a
  lost answer never runs the write twice). The others carry none: a heartbeat's replayed key would
  return an old expiry without extending the lease; store ``PUT``/``DELETE`` are idempotent by
  nature and the server would cache their errors forever; maintenance changes nothing that a
  second run would redo;
* a ``limit`` outside 1..1000 is refused before sending (the server refuses it);
* NullTickets quirk: ``GET /runs/{run_id}/events`` is an admin operation in the contract, but its
  auth layer wants *some* Bearer even without an api token (:data:`CREDENTIALS`);
* a success answer is validated as the table's model: a small wire answer (``{"id"}``,
  ``{"expires_at_ms"}``, ...) that does not fit is a broken answer (``TrackerUnavailable``,
  transient); a domain model of the wrong shape is ``TrackerRejected`` naming the field. A 204 or
  empty answer is None (``claim``: no work). Another 2xx than the table's is accepted as it is.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any, TypedDict, TypeVar, Unpack

import httpx
from pydantic import TypeAdapter, ValidationError

from tracker_client import models as domain
from tracker_client.capabilities import LeaseRef
from tracker_client.contract.table import Operation, operation
from tracker_client.errors import (
    TrackerError,
    TrackerRejected,
    TrackerUnavailable,
    ValidationFailed,
)
from tracker_client.nulltickets.codec import check_answer_depth, dumps, encode_query, loads
from tracker_client.nulltickets.discovery import Discovery
from tracker_client.nulltickets.transport import Credentials, HttpTransport
from tracker_client.validation import describe_validation

__all__ = ["CREDENTIALS", "Request", "Wire", "log"]

log = logging.getLogger("backlog_worker.tracker.remote")

M = TypeVar("M")

#: Writes whose tracker method takes no key that still get a fresh one per call (see above).
#: Operations whose credentials differ from the table's ``auth`` on a real NullTickets server.
CREDENTIALS: Mapping[str, Credentials] = {"list_events": "any_bearer"}

#: Page sizes both servers accept.
_LIMITS = range(1, 1001)


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}
_CHECKED: dict[tuple[str, Any], Operation] = {}


def _adapter(answer_type: Any) -> TypeAdapter[Any]:
    """One TypeAdapter per answer type (building one costs far more than validating with it)."""
    adapter = _ADAPTERS.get(answer_type)
    if adapter is None:
        adapter = _ADAPTERS[answer_type] = TypeAdapter(answer_type)
    return adapter


def _checked(name: str, into: Any) -> Operation:
    """The operation ``name``, once it is known to answer ``into`` (the caller's type must be
    the table's, so a client method cannot drift from the contract)."""
    op = _CHECKED.get((name, into))
    if op is None:
        op = operation(name)
        if op.answer_type != into:
            raise TypeError(f"{name}: the contract answers {op.answer_type!r}, not {into!r}")
        _CHECKED[name, into] = op
    return op


class Request(TypedDict, total=False):
    """What a call gives besides the operation and its path parameters."""

    #: Query parameters (None values left out); only those the table lists.
    query: Mapping[str, object | None]
    #: The body, JSON-encoded here (``raw``: bytes already encoded, sent as they are).
    body: Any
    raw: bytes
    #: The lease whose token authenticates a lease operation.
    lease: LeaseRef
    #: The caller's key for this logical write (None: a fresh one, for keyed writes).
    idempotency_key: str | None
    #: A long poll's read timeout, instead of the client's.
    read_timeout_s: float
    #: False: tried once whatever the retry settings say.
    retry: bool


class Wire:
    """Sends contract operations through one transport, after one discovery of the server."""

    def __init__(self, http: HttpTransport, discovery: Discovery) -> None:
        self.http = http
        self.discovery = discovery
        self._warned: set[str] = set()

    @staticmethod
    def key(idempotency_key: str | None) -> str:
        """The caller's key for this logical write, or a fresh one (reused across its retries)."""
        return idempotency_key if idempotency_key else str(uuid.uuid4())

    async def send(self, name: str, *params: str, **request: Unpack[Request]) -> httpx.Response:
        """Send operation ``name`` with its path ``params`` (in the template's order) and
        return the 2xx answer (see :class:`Request` for the rest)."""
        return await self._send(operation(name), params, **request)

    async def call(self, name: str, *params: str, into: type[M], **request: Unpack[Request]) -> M:
        """:meth:`send`, then the answer validated as ``into`` (which must be the table's
        answer type of ``name``). A 204 or empty answer is refused: use :meth:`call_or_none`."""
        result = await self.call_or_none(name, *params, into=into, **request)
        if result is None:
            op = operation(name)
            raise TrackerUnavailable(
                f"{op.method} {op.path}: empty answer", code="invalid_response"
            )
        return result

    async def call_or_none(
        self, name: str, *params: str, into: type[M], **request: Unpack[Request]
    ) -> M | None:
        """:meth:`call`, with None for a 204 or empty answer (``claim``: no work)."""
        op = _checked(name, into)
        response = await self._send(op, params, **request)
        if response.status_code == 204 or not response.content:
            return None
        return self.parse_answer(op, response, into)

    async def generic(self, name: str, /, *params: str, **arguments: Any) -> Any:
        """Operation ``name`` from its table row alone: ``arguments`` named in the row's query
        go to the query string, the rest (and ``idempotency_key``) to the body; the answer is
        the row's model, its one field for a one-field answer, or None. A row with a
        ``body_param`` sends that one argument as the whole body (``ingest_traces(document=)``).
        Lease operations need their lease and have typed methods: they are refused here.
        ``name`` is positional only: a body field may be called ``name`` (``apply_pipeline``)."""
        op = operation(name)
        if op.auth == "lease":
            raise TypeError(f"{name}: a lease operation is called through its typed method")
        key = arguments.pop("idempotency_key", None)
        if op.body_param is not None:  # the whole body is this one argument (OTLP document)
            if set(arguments) != {op.body_param}:
                raise TypeError(f"{name}: takes {op.body_param}= only, got {sorted(arguments)}")
            document = dict(arguments[op.body_param])
            return await self.call_or_none(
                name, *params, into=op.answer_type, body=document, idempotency_key=key
            )
        names = {q.name for q in op.query}
        query = {k: v for k, v in arguments.items() if k in names}
        body = {k: v for k, v in arguments.items() if k not in names}
        request: Request = {"query": query, "idempotency_key": key}
        if op.body is not None and (body or op.body_required):
            request["body"] = op.body.model_validate(body).model_dump(exclude_unset=True)
        elif body:
            raise TypeError(f"{name}: unknown arguments {sorted(body)}")
        if op.answer_type is None:
            await self._send(op, params, **request)
            return None
        answer = await self.call_or_none(name, *params, into=op.answer_type, **request)
        wire_model = op.response is not None and op.response.__module__ != domain.__name__
        one_field = wire_model and op.response is not None and len(op.response.model_fields) == 1
        if answer is not None and op.shape == "object" and one_field:
            (field,) = type(answer).model_fields  # a one-field answer is its value: {"count": 7}
            return getattr(answer, field)
        return answer

    async def _send(
        self,
        op: Operation,
        params: tuple[str, ...],
        *,
        query: Mapping[str, object | None] | None = None,
        body: Any = None,
        raw: bytes | None = None,
        lease: LeaseRef | None = None,
        idempotency_key: str | None = None,
        read_timeout_s: float | None = None,
        retry: bool = True,
    ) -> httpx.Response:
        if len(params) != len(op.params):
            raise TypeError(f"{op.name}: path parameters {op.params}, got {len(params)} values")
        if op.body is None and (body is not None or raw is not None):
            raise TypeError(f"{op.name}: the contract reads no body")
        path = op.format(**dict(zip(op.params, params, strict=True)))
        if query:
            path = f"{path}?{self._query(op, query)}"  # a bad limit is refused before any request
        await self.discovery.get()
        if op.extension is not None:
            await self.discovery.require(op.extension, op.name)
        if raw is None and body is not None:
            raw = dumps(body)
        key = None
        if op.idempotent:
            key = self.key(idempotency_key)
        auth = CREDENTIALS.get(op.name, op.auth)
        token = None
        if auth == "lease":
            if lease is None:
                raise TypeError(f"{op.name}: a lease operation needs the lease")
            token = lease.lease_token.get_secret_value()
        return await self.http.send(
            op.method,
            path,
            body=raw,
            auth=auth,
            lease_token=token,
            idempotency_key=key,
            read_timeout_s=read_timeout_s,
            retry=retry,
        )

    @staticmethod
    def _query(op: Operation, query: Mapping[str, object | None]) -> str:
        known = {q.name for q in op.query}
        unknown = set(query) - known
        if unknown:
            raise TypeError(f"{op.name}: unknown query parameters {sorted(unknown)}")
        limit = query.get("limit")
        if isinstance(limit, int) and limit not in _LIMITS:
            raise ValidationFailed(
                f"{op.name}: limit must be 1..1000, got {limit}", code="invalid_limit"
            )
        return encode_query(query)

    @staticmethod
    def parse(op: Operation, doc: Any, into: type[M]) -> M:
        """``doc`` validated as ``into`` (see the module docstring for the two failures)."""
        small = op.response is not None and op.response.__module__ != domain.__name__
        try:
            validated: M = _adapter(into).validate_python(doc, strict=small or None)
            return validated
        except ValidationError as exc:
            raise Wire._refused(op, exc, small) from exc

    @staticmethod
    def parse_answer(op: Operation, response: httpx.Response, into: type[M]) -> M:
        """The answer's body validated as ``into`` straight from its bytes (pydantic parses the
        JSON: no dicts and lists built first, ~1/4 of a worker's parsing per request); a body
        nested too deep or that is not JSON fails as :func:`~.codec.loads` fails it."""
        what = f"{op.method} {op.path}"
        raw = response.content
        check_answer_depth(raw, what)
        small = op.response is not None and op.response.__module__ != domain.__name__
        try:
            validated: M = _adapter(into).validate_json(raw, strict=small or None)
            return validated
        except ValidationError as exc:
            if exc.errors()[0]["type"] != "json_invalid":
                raise Wire._refused(op, exc, small) from exc
        # Not JSON to pydantic's parser, which is stricter than the standard library's (a lone
        # surrogate's escape): as the standard library reads it, or not JSON at all.
        return Wire.parse(op, loads(response, what), into)

    @staticmethod
    def _refused(op: Operation, exc: ValidationError, small: bool) -> TrackerError:
        """The error an answer of the wrong shape is (see the module docstring)."""
        what = f"{op.method} {op.path}"
        first = exc.errors()[0]
        if small:
            fields = ", ".join(repr(str(p)) for p in first["loc"]) or "body"
            return TrackerUnavailable(
                f"{what}: answer without a valid {fields}", code="invalid_response"
            )
        where = describe_validation(exc, first_only=True, empty="(root)")
        return TrackerRejected(
            f"{what}: the tracker's answer has an unexpected shape at {where}",
            code="invalid_response",
        )

    def warn_once(self, key: str, message: str, **extra: Any) -> None:
        """Log ``message`` as a WARNING the first time ``key`` is seen on this client."""
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, extra={"action": key, **extra})
