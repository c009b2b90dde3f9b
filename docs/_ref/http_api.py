"""The HTTP API reference: every operation of the contract table
(:data:`tracker_client.contract.table.OPERATIONS`: method, path, auth, request and answer
models, query parameters, statuses), which of them are NullTickets' own and which are this
project's extensions (:data:`~tracker_client.contract.table.EXTENSIONS`), and the error
table (:data:`tracker_client.contract.wire_errors.ERRORS`). The statuses are read from the
OpenAPI document ``tracker serve`` serves (``GET /openapi.json``), which is built from the same
table, so the page, the document and the routes agree."""

from __future__ import annotations

import re
from typing import Any

from .markdown import code, slug, table, text

_REF = "#/components/schemas/"

_AUTH = {
    "public": "none",
    "admin": "api token",
    "lease": "lease token",
}


def operations() -> list[Any]:
    """Every operation of the contract table, in route order."""
    from tracker_client.contract.table import OPERATIONS

    return list(OPERATIONS)


def model_link(name: str) -> str:
    """A model's name, linked to its section of the page."""
    return f"[{code(name)}](#{slug(name)})"


def _answer(op: Any) -> str:
    if op.response is None:
        return "none" if op.status == 204 else "a document"
    name = model_link(op.response.__name__)
    return {"list": f"array of {name}", "page": f"page of {name}"}.get(op.shape, name)


def _statuses(op: Any, doc: dict[str, Any]) -> str:
    responses = doc["paths"][op.path][op.method.lower()]["responses"]
    return ", ".join(code(status) for status in responses)


def _row_kind(op: Any) -> str:
    if op.extension is not None:
        return f"extension {code(op.extension)}"
    if op.features:
        return "NullTickets, extended by " + ", ".join(code(f) for f in op.features)
    return "NullTickets"


def section(op: Any, doc: dict[str, Any]) -> str:
    """One operation's section."""
    rows = [
        ["operation", code(op.name)],
        ["auth", _AUTH[op.auth]],
        ["from", _row_kind(op)],
        [
            "request body",
            (code(op.body.__name__) + ("" if op.body_required else " (optional)"))
            if op.body is not None
            else "none",
        ],
        [
            "answer",
            f"{code(op.status)}: {_answer(op)}"
            + ("; `204`: no work" if op.name == "claim" else ""),
        ],
        ["statuses", _statuses(op, doc)],
    ]
    if op.query:
        rows.append(
            [
                "query",
                ", ".join(
                    code(q.name)
                    + (f" ({q.type})" if q.type != "string" else "")
                    + (" (required)" if q.required else "")
                    for q in op.query
                ),
            ]
        )
    if op.idempotent:
        rows.append(["Idempotency-Key", "honoured: a retried write is answered as the first was"])
    if op.wakes:
        rows.append(["wakes", "long polls (`wait_for_work`) on success"])
    if op.quirk:
        rows.append(["plain NullTickets", text(op.quirk)])
    return f"### {op.method} {text(op.path)}\n\n{text(op.summary)}.\n\n" + table(["", ""], rows)


def schema_type(schema: dict[str, Any]) -> str:
    """A JSON schema's type in a few words, models linked."""
    if "$ref" in schema:
        return model_link(schema["$ref"].removeprefix(_REF))
    if "anyOf" in schema:
        kinds = [s for s in schema["anyOf"] if s.get("type") != "null"]
        shown = " or ".join(schema_type(s) for s in kinds) or "null"
        return shown + (" or null" if len(kinds) < len(schema["anyOf"]) else "")
    if "enum" in schema:
        return " or ".join(code(repr(v).replace("'", '"')) for v in schema["enum"])
    if "const" in schema:
        return code(repr(schema["const"]).replace("'", '"'))
    kind = schema.get("type")
    if kind == "array":
        return "array of " + schema_type(schema.get("items", {}))
    if kind == "object" and "additionalProperties" in schema:
        inner = schema["additionalProperties"]
        return "object" if inner is True else "object of " + schema_type(inner)
    return str(kind or "any JSON")


def models(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every model the operations name, and every model those name, by name."""
    schemas: dict[str, dict[str, Any]] = doc["components"]["schemas"]
    todo = [m.__name__ for op in operations() for m in (op.body, op.response) if m is not None]
    found: dict[str, dict[str, Any]] = {}
    while todo:
        name = todo.pop(0)
        if name in found or name not in schemas:
            continue
        found[name] = schemas[name]
        text_of = repr(schemas[name])
        todo += [ref.split("'")[0] for ref in text_of.split(_REF)[1:]]
    return dict(sorted(found.items()))


def model_section(name: str, schema: dict[str, Any]) -> str:
    """One model: what it is, and each field's type, whether it is required, and the extension
    that reads it (a plain NullTickets server ignores such a field)."""
    required = set(schema.get("required", ()))
    rows = [
        [
            code(field),
            schema_type(spec),
            "yes" if field in required else "",
            code(spec["x-extension"]) if "x-extension" in spec else "",
        ]
        for field, spec in schema.get("properties", {}).items()
    ]
    about = " ".join((schema.get("description") or "").split("\n\n")[0].split())
    body = table(["field", "type", "required", "extension"], rows) if rows else ""
    if not rows and "type" in schema:
        body = f"A JSON {schema_type(schema)}.\n"
    return f"### {name}\n\n" + (_rst(about) + "\n\n" if about else "") + body


def _rst(value: str) -> str:
    """A docstring's reST inline markup (````x````, ``:data:`x```) as Markdown code."""
    return text(re.sub(r":\w+:`~?([^`]+)`", r"`\1`", value).replace("``", "`"))


def page() -> str:
    """The whole HTTP API reference page."""
    from tracker_client.contract.table import CONNECTION_EXTENSIONS, EXTENSIONS
    from tracker_client.contract.wire_errors import ERRORS
    from tracker_client.serve.openapi import openapi_document

    doc = openapi_document()
    ops = operations()
    plain = [op for op in ops if op.extension is None]
    extended = [op for op in ops if op.extension is not None]
    parts = [
        "# HTTP API\n",
        "The API of `backlog-worker tracker serve`, which is NullTickets' API plus extensions, "
        "generated from the contract table (`tracker_client/contract/operations.py`) when the "
        "docs are built. The same table gives the server its routes and auth classes, the "
        "remote client its requests, and the OpenAPI 3.1 document the server answers at "
        "`GET /openapi.json` (and `/.well-known/openapi.json`), where every model named here "
        "is spelled out.\n",
        "**Auth**: *api token* routes need `Authorization: Bearer <api token>` when the rail "
        "has one; *lease token* routes need the token the claim answered; every route but the "
        "public ones may answer `401`, and any route `500` or `503` (the rail unavailable: "
        "retry after `Retry-After`).\n",
        "**Extensions**: a plain NullTickets server has only the operations marked "
        "*NullTickets*; a served rail lists the extensions it has in `GET /health` "
        "`extensions`, and a client uses an extension only when listed. An extension field in "
        "a plain operation's body is ignored by a plain server.\n",
        "## Operations\n",
        table(
            ["method", "path", "auth", "from", "summary"],
            [
                [
                    code(op.method),
                    f"[{text(op.path)}](#{slug(op.method + ' ' + op.path)})",
                    _AUTH[op.auth],
                    "NullTickets" if op.extension is None else code(op.extension),
                    text(op.summary),
                ]
                for op in ops
            ],
        ),
        f"## NullTickets' operations\n\n{len(plain)} operations a plain NullTickets server "
        "answers too.\n",
        *(section(op, doc) for op in plain),
        f"## Extensions\n\n{len(extended)} operations only this project's rails answer.\n",
        *(section(op, doc) for op in extended),
        "## The extensions\n",
        table(
            ["extension", "what it adds"],
            [
                [
                    code(name),
                    text(what) + (" (the connection)" if name in CONNECTION_EXTENSIONS else ""),
                ]
                for name, what in EXTENSIONS.items()
            ],
        ),
        "## Models\n",
        "The request bodies and answers the operations name, as the OpenAPI document spells "
        "them. A field marked with an extension is read only by a rail that lists it; a plain "
        "NullTickets server ignores it.\n",
        *(model_section(name, schema) for name, schema in models(doc).items()),
        "## Errors\n",
        'Every error answer is JSON `{"error": {"code", "message"}}` (an invalid '
        "transition adds `allowed`; a full backlog adds `role`, `depth`, `cap` and a "
        "`Retry-After` header). How each status and code reads as an exception of the "
        "client (`tracker_client.errors`):\n",
        table(
            ["status", "code", "routes", "exception"],
            [
                [
                    ", ".join(code(s) for s in (row.status, *row.also)),
                    code(row.wire_code)
                    if row.wire_code
                    else (", ".join(code(c) for c in sorted(row.exc_codes)) or "any"),
                    {True: "lease routes", False: "other routes", None: "any"}[row.lease_route],
                    code(row.error.__name__),
                ]
                for row in ERRORS
            ],
        ),
    ]
    return "\n".join(parts)
