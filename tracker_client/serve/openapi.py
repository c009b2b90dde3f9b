"""The OpenAPI 3.1 document of the served tracker (``GET /openapi.json``), derived from the wire
contract (:data:`tracker_client.contract.table.OPERATIONS`).

Paths, methods, auth, query parameters, statuses and which model each body and answer is come
from the table; object schemas come from the pydantic models, so the shapes cannot drift from
what the server reads and dumps. Only the error object's schema is written here.

Pure: it may touch the contract table and the models (:mod:`tracker_client.models`) only, never a
request or the tracker.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tracker_client import models
from tracker_client.contract.table import OPERATIONS, Operation

__all__ = ["QUERY_PARAMS", "openapi_document"]

_REF = "#/components/schemas/{model}"
_STR = {"type": "string"}
_INT = {"type": "integer"}

#: Query parameters per (method, path) as the document spells them; all optional except ``q``
#: of the store search.
QUERY_PARAMS: dict[tuple[str, str], tuple[tuple[str, dict[str, Any]], ...]] = {
    (op.method.lower(), op.path): tuple((q.name, q.schema()) for q in op.query)
    for op in OPERATIONS
    if op.query
}

_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": _STR,
                "message": _STR,
                "allowed": {"type": "array", "items": _STR},
                "role": _STR,
                "depth": _INT,
                "cap": _INT,
            },
        }
    },
}

_ERROR_TEXT = {
    400: "Bad request (invalid_json, validation_failed, invalid_transition, ...)",
    401: "Missing or invalid token",
    404: "Not found (or the lease is gone, on lease routes)",
    409: "Conflict",
    410: "Lease expired or revoked",
    413: "Request body over the limit",
    429: "Backlog of the role is full (Retry-After)",
}


def _models() -> list[type[BaseModel]]:
    """Every model of the contract: the table's bodies and answers, and every public model of
    :mod:`tracker_client.models` (the generic ``Page`` is spelled out per operation)."""
    found: dict[type[BaseModel], None] = {}
    for name in models.__all__:
        obj = getattr(models, name)
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj is not models.Page:
            found[obj] = None
    for op in OPERATIONS:
        for model in (op.body, op.response):
            if model is not None:
                found[model] = None
    return list(found)


def _answer_schema(op: Operation) -> dict[str, Any] | None:
    if op.response is None:
        return None
    ref = {"$ref": _REF.format(model=op.response.__name__)}
    if op.shape == "list":
        return {"type": "array", "items": ref}
    if op.shape == "page":
        return {
            "type": "object",
            "required": ["items", "next_cursor"],
            "properties": {
                "items": {"type": "array", "items": ref},
                "next_cursor": {"type": ["string", "null"]},
            },
        }
    return ref


def _params(op: Operation) -> list[dict[str, Any]]:
    params = [{"name": n, "in": "path", "required": True, "schema": _STR} for n in op.params]
    for q in op.query:
        params.append({"name": q.name, "in": "query", "required": q.required, "schema": q.schema()})
    return params


def _operation(op: Operation) -> dict[str, Any]:
    doc: dict[str, Any] = {"summary": op.summary, "operationId": op.name, "x-auth": op.auth}
    if op.extension is not None:
        doc["x-extension"] = op.extension
    if op.features:
        doc["x-extensions"] = list(op.features)
    if op.quirk:
        doc["x-nulltickets-quirk"] = op.quirk  # what a plain server does wrong here
    if op.auth != "public":
        doc["security"] = [{"bearer": []}]
    if params := _params(op):
        doc["parameters"] = params
    if op.body is not None:
        content: dict[str, Any] = {
            "application/json": {"schema": {"$ref": _REF.format(model=op.body.__name__)}}
        }
        if op.raw_body:  # any other content type: the bytes as they are (OTLP protobuf)
            content["application/x-protobuf"] = {"schema": {"type": "string", "format": "binary"}}
        doc["requestBody"] = {"required": op.body_required, "content": content}
    ok: dict[str, Any] = {"description": "OK"}
    if (schema := _answer_schema(op)) is not None:
        ok["content"] = {"application/json": {"schema": schema}}
    responses: dict[str, Any] = {str(op.status): ok}
    if op.name == "claim":
        responses["204"] = {"description": "No work"}
    for code in sorted({*op.errors, 500, 503} | ({401} if op.auth != "public" else set())):
        responses[str(code)] = {
            "description": _ERROR_TEXT.get(code, "Server error"),
            "content": {"application/json": {"schema": {"$ref": _REF.format(model="Error")}}},
        }
    doc["responses"] = responses
    return doc


@cache
def openapi_document() -> dict[str, Any]:
    """The document, built once."""
    # One mode for all (bodies too): a model in two modes would be split in -Input/-Output.
    _, defs = models_json_schema([(m, "serialization") for m in _models()], ref_template=_REF)
    schemas = {**defs.get("$defs", {}), "Error": _ERROR_SCHEMA}
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "backlog-worker served tracker (NullTickets API)",
            "version": "1",
            "description": (
                "The embedded tracker over the NullTickets HTTP API, with its traps fixed and "
                "extension routes. Admin routes take the api token, lease routes the lease token."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
