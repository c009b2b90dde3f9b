"""The handler of an operation that has no hand-written one, made from its contract row.

An operation of :data:`tracker_client.nulltickets.contract.OPERATIONS` whose tracker method
takes its path parameters in order, its body's fields and its query parameters as keywords,
and returns its answer model (or a list or page of it, or nothing) needs no handler: the
application serves it with :func:`generic_handler`. A new extension operation is then one
row in the table and the tracker method (plus the client's call).

Hand-written handlers remain for what a row cannot say: renamed or converted arguments
(``timeout_ms`` -> seconds), lease checks, raw store paths, long polls, answers reshaped as
NullTickets shapes them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from tracker_client.nulltickets.contract import Operation
from tracker_client.serve.helpers import dump, int_query, page_json, tracker_of
from tracker_client.serve.http import Handler, json_response, no_content, read_model

__all__ = ["generic_handler"]


def _answer(op: Operation, result: Any) -> Response:
    if op.response is None or result is None:
        return no_content()
    if op.shape == "list":
        return json_response([dump(item) for item in result], op.status)
    if op.shape == "page":
        return json_response(page_json(result), op.status)
    if isinstance(result, BaseModel):
        return json_response(dump(result), op.status)
    return json_response(result, op.status)


def generic_handler(op: Operation) -> Handler:
    """A handler calling ``tracker.<op.name>(*path params, **body fields, **query params)``.

    The body is read (when the row has one) as ``op.body``, an empty one as ``{}`` unless
    ``op.body_required``; an integer query parameter that is not one is 400
    ``invalid_request``; absent query parameters are not passed (the method's defaults hold).
    """

    async def handler(request: Request) -> Response:
        kwargs: dict[str, Any] = {}
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
        args = [request.path_params[name] for name in op.params]
        method = getattr(tracker_of(request), op.name)
        return _answer(op, await method(*args, **kwargs))

    handler.__name__ = op.name
    handler.__doc__ = f"``{op.method} {op.path}``: {op.summary} (from the contract row)."
    return handler
