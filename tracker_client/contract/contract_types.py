"""What one row of the wire contract is: :class:`Operation` and its :class:`Query` parameters.

The rows themselves are the table (:mod:`tracker_client.contract.operations`); the lookups
over it and the contract's one import path are :mod:`tracker_client.contract.table`,
which re-exports these names. They are apart from the table so that a row's shape (its fields,
its path template and how it is filled) reads on one page, and so that the table can be built
from them without importing the lookups that are built from the table.

Pure data and small helpers: it imports the domain models (for ``Page``) and nothing that talks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from types import GenericAlias
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel

from tracker_client import models as m
from tracker_client.bounds import MAX_LEASE_TTL_MS

__all__ = ["MAX_LEASE_TTL_MS", "Auth", "Method", "Operation", "Query", "Shape"]

#: ``public``: no token; ``admin``: the api token (when one is set); ``lease``: the lease token.
Auth = Literal["public", "admin", "lease"]
Method = Literal["GET", "POST", "PUT", "DELETE"]
#: ``object``: one model; ``list``: a JSON array of it; ``page``: ``{"items", "next_cursor"}``.
Shape = Literal["object", "list", "page"]


_PARAM = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Query:
    """One query parameter (all optional unless ``required``)."""

    name: str
    type: Literal["string", "integer"] = "string"
    required: bool = False
    #: The range the server accepts (an integer), or the shortest string; stated in the
    #: OpenAPI document from here, and checked by the server with the same constants
    #: (:mod:`tracker_client.bounds`).
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None

    def schema(self) -> dict[str, Any]:
        """The parameter's JSON schema, with its range."""
        found: dict[str, Any] = {"type": self.type}
        for key, value in (
            ("minimum", self.minimum),
            ("maximum", self.maximum),
            ("minLength", self.min_length),
        ):
            if value is not None:
                found[key] = value
        return found


@dataclass(frozen=True)
class Operation:
    """One operation of the wire contract."""

    #: The ``Tracker`` method it carries out, or a route name (``openapi``, ``openapi_well_known``).
    name: str
    method: Method
    #: Path template, e.g. ``/runs/{run_id}/events``; each ``{param}`` is one quoted segment.
    path: str
    auth: Auth
    summary: str
    #: The request body's model (None: no body is read).
    body: type[BaseModel] | None = None
    #: False: an empty body is read as ``{}`` (and a plain server ignores the body).
    body_required: bool = True
    #: The success status (``claim`` also answers 204 with no body: no work).
    status: int = 200
    #: The success answer's model (None: no body, or a document with no model).
    response: type[BaseModel] | None = None
    shape: Shape = "object"
    query: tuple[Query, ...] = ()
    #: Error statuses the operation documents (401/500/503 are implied).
    errors: tuple[int, ...] = ()
    #: The ``/health`` extension this operation belongs to; None: plain NullTickets.
    extension: str | None = None
    #: Extensions that extend this plain operation's body or answer.
    features: tuple[str, ...] = ()
    #: A success may make work claimable: it wakes long polls (``wait_for_work``).
    wakes: bool = False
    #: The tracker method takes an ``idempotency_key`` (the ``Idempotency-Key`` header): a
    #: retried write with the same key is answered as the first one was.
    idempotent: bool = False
    #: What a plain NullTickets server does wrong here, that a client must work around
    #: (docs/guarantees/nulltickets.md); the workaround is documented where the client applies it.
    quirk: str = ""
    #: The tracker method takes the whole body as this one keyword argument (an OTLP
    #: document: ``call("ingest_traces", document=...)``), not the body's fields.
    body_param: str | None = None
    #: Another content type than JSON is read too, as raw bytes (OTLP: stored as a blob).
    raw_body: bool = False

    @cached_property
    def params(self) -> tuple[str, ...]:
        """The path parameters, in order (parsed once: the client reads them per request)."""
        return tuple(_PARAM.findall(self.path))

    @property
    def answer_type(self) -> Any:
        """What a success body validates as (``TypeAdapter(op.answer_type)``): the model, a
        list of it or a ``Page`` of it; None when the answer has no model."""
        if self.response is None:
            return None
        if self.shape == "list":
            return GenericAlias(list, (self.response,))
        if self.shape == "page":
            return m.Page[self.response]  # type: ignore[name-defined]
        return self.response

    def format(self, **params: str) -> str:
        """The path with every parameter percent-quoted as one segment (``/`` as ``%2F``).

        A missing or unknown parameter raises ``KeyError``/``TypeError``: a path is never sent
        half-filled.
        """
        unknown = set(params) - set(self.params)
        if unknown:
            raise TypeError(f"{self.name}: unknown path parameters {sorted(unknown)}")
        return _PARAM.sub(lambda hit: quote(str(params[hit.group(1)]), safe=""), self.path)
