"""The handler of an operation that has no hand-written one, made from its contract row.

An operation of :data:`tracker_client.contract.table.OPERATIONS` whose tracker method
takes its path parameters in order, its body's fields and its query parameters as keywords
(and ``idempotency_key`` when the row is ``idempotent``), and returns its answer model (or a
list or page of it, a scalar for a one-field answer, or nothing) needs no handler: the
application serves it with :func:`generic_handler`. On a lease route of a run
(``/runs/{run_id}/...``) the method takes the checked lease first instead of the run id: the
lease is checked before the body is read (:func:`~tracker_client.serve.helpers.checked_lease`).
A new extension operation is then one row in the table and the tracker method (plus the
client's call).

Hand-written handlers remain for what a row cannot say: renamed or converted arguments
(``timeout_ms`` -> seconds), raw store paths, long polls, answers reshaped as NullTickets
shapes them.

It may touch the request (path, query and body, through :mod:`~tracker_client.serve.http`), the
contract row and the tracker method the row names (through the ``Tracker`` protocol); nothing of the
storage.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from tracker_client.contract.table import Operation
from tracker_client.serve.helpers import (
    checked_lease,
    idem_key,
    int_query,
    model_json,
    page_json,
    tracker_of,
)
from tracker_client.serve.http import (
    Handler,
    json_response,
    no_content,
    raw_json_response,
    read_model,
)

__all__ = ["generic_handler"]


def _answer(op: Operation, result: Any) -> Response:
    if op.response is None or result is None:
        return no_content()
    if op.shape == "list":
        return raw_json_response(b"[" + b",".join(map(model_json, result)) + b"]", op.status)
    if op.shape == "page":
        return json_response(page_json(result), op.status)
    if isinstance(result, BaseModel):
        return raw_json_response(model_json(result), op.status)
    (field,) = op.response.model_fields  # a scalar answers a one-field model: {"id": 7}
    return json_response({field: result}, op.status)


def generic_handler(op: Operation) -> Handler:
    """A handler calling ``tracker.<op.name>(*path params, **body fields, **query params)``.

    The body is read (when the row has one) as ``op.body``, an empty one as ``{}`` unless
    ``op.body_required``; an integer query parameter that is not one is 400
    ``invalid_request``; absent query parameters are not passed (the method's defaults hold).
    """

    lease_write = op.auth == "lease" and op.params == ("run_id",)

    async def handler(request: Request) -> Response:
        args: list[Any] = [request.path_params[name] for name in op.params]
        if lease_write:  # checked before a byte of the body is read
            args = [await checked_lease(request, args[0], op.name)]
        kwargs: dict[str, Any] = {}
        if op.idempotent:
            kwargs["idempotency_key"] = idem_key(request)
        if op.body is not None:
            body = await read_model(request, op.body, required=op.body_required)
            kwargs.update({name: getattr(body, name) for name in type(body).model_fields})
        for query in op.query:
            if request.query_params.get(query.name) in (None, ""):
                continue
            if query.type == "integer":
                kwargs[query.name] = int_query(request, query.name, 0)
            else:
                kwargs[query.name] = request.query_params[query.name]
        method = getattr(tracker_of(request), op.name)
        return _answer(op, await method(*args, **kwargs))

    handler.__name__ = op.name
    handler.__doc__ = f"``{op.method} {op.path}``: {op.summary} (from the contract row)."
    return handler
