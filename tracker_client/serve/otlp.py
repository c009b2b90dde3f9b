"""The served tracker's OTLP ingest: ``POST /v1/traces`` and ``POST /otlp/v1/traces``.

As NullTickets does it: a JSON content type (``application/json``, with any
parameters, in any case) carries an OTLP/JSON ``ExportTraceServiceRequest`` whose spans the
tracker parses and links to their task and run; any other content type (OTLP protobuf, or none)
is stored as a blob. Both answer ``{"batch_id", "accepted_spans", "stored"}``. The routes are
admin routes (the api token, when one is set); see docs/reference/http-api.md.

Bad input stores nothing: a body over the OTLP limit (:data:`DEFAULT_MAX_OTLP_BYTES`, lower
than the general request limit; ``tracker serve --max-otlp-bytes``) is 413, refused on its
declared length before it is read; JSON that does not parse, or nests past the body parser's
limits, is 400 ``invalid_json``/``json_too_deep``; a document not of the OTLP shape is 400
``invalid_otlp`` naming the field (the tracker checks it). ``Content-Encoding: gzip`` (what
OTLP exporters may send) is decoded under the same limit; another encoding is 415.

It may touch the request and the tracker of the request (``call("ingest_traces", ...)``, and
the blob ingest of a tracker that has one); never the storage directly.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable
from typing import Protocol, runtime_checkable

import anyio
from starlette.requests import Request
from starlette.responses import Response

from tracker_client.errors import Unsupported
from tracker_client.observe_models import OtlpIngestResult
from tracker_client.serve.helpers import dump, tracker_of
from tracker_client.serve.http import ApiError, Handlers, json_response, parse_body, read_bytes

__all__ = ["DEFAULT_MAX_OTLP_BYTES", "HANDLERS", "BlobIngest", "is_json"]

#: The largest OTLP body read (after gzip decoding too); larger ones get 413.
DEFAULT_MAX_OTLP_BYTES = 4 * 1024 * 1024
#: Bodies larger than this are parsed in a worker thread.
_OFF_LOOP_BYTES = 64 * 1024
#: The content type a blob is stored under when the request named none.
_NO_TYPE = "application/octet-stream"

#: This module's handlers by operation name.
HANDLERS = Handlers()


@runtime_checkable
class BlobIngest(Protocol):
    """A tracker that keeps OTLP bodies it does not parse (the embedded one does)."""

    def ingest_trace_blob(self, data: bytes, content_type: str) -> Awaitable[OtlpIngestResult]:
        """Store ``data`` as a blob batch."""
        ...


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header is JSON as NullTickets reads it: ``application/json``,
    any parameters (``; charset=utf-8``) and case."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def _decoded(request: Request, raw: bytes, cap: int) -> bytes:
    """The body with its ``Content-Encoding`` undone (gzip), never more than ``cap`` bytes."""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise ApiError(
            415, "unsupported_encoding", f"Content-Encoding {encoding!r}: use gzip or none"
        )
    inflate = zlib.decompressobj(wbits=31)
    try:
        out = inflate.decompress(raw, cap + 1)
    except zlib.error as exc:
        raise ApiError(400, "invalid_gzip", f"the gzip body does not decode: {exc}") from exc
    if len(out) > cap:
        raise ApiError(413, "request_too_large", f"request body over {cap} bytes decompressed")
    if not inflate.eof:
        raise ApiError(400, "invalid_gzip", "the gzip body is truncated")
    return out


async def _ingest(request: Request, operation: str) -> Response:
    cap: int = getattr(request.app.state, "max_otlp_bytes", DEFAULT_MAX_OTLP_BYTES)
    content_type = request.headers.get("content-type")
    raw = _decoded(request, await read_bytes(request, cap), cap)
    tracker = tracker_of(request)
    if is_json(content_type):
        # A large body is parsed off the event loop (the other requests go on meanwhile).
        big = len(raw) > _OFF_LOOP_BYTES
        document = await anyio.to_thread.run_sync(parse_body, raw) if big else parse_body(raw)
        if not isinstance(document, dict):
            raise ApiError(400, "invalid_otlp", "OTLP document: expected a JSON object")
        result: OtlpIngestResult = await tracker.call(operation, document=document)
    elif isinstance(tracker, BlobIngest):
        result = await tracker.ingest_trace_blob(raw, (content_type or "").strip() or _NO_TYPE)
    else:
        raise Unsupported("this tracker keeps no OTLP blobs: send OTLP/JSON")
    return json_response(dump(result))


@HANDLERS
async def ingest_traces(request: Request) -> Response:
    """``POST /v1/traces``: OTLP/JSON spans parsed and linked; any other body kept as a blob."""
    return await _ingest(request, "ingest_traces")


@HANDLERS
async def ingest_traces_collector(request: Request) -> Response:
    """``POST /otlp/v1/traces``: as ``POST /v1/traces`` (the collector's path)."""
    return await _ingest(request, "ingest_traces_collector")
