"""What the NullTickets client puts on the wire and reads off it: JSON bodies and query strings.

Values are checked to be plain JSON before a request is built (:func:`check_json`), serialised
once to the bytes every retry sends again (:func:`dumps`), query strings are encoded the way the
server reads them (:func:`encode_query`), and a success body is parsed (:func:`loads`). These
are pure functions over values and bytes: the client's parts call them while they shape a
request or read its answer, apart from :mod:`~tracker_client.nulltickets.transport`, which sends
the bytes and knows nothing of what they say.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tracker_client.errors import AnswerRefused, TrackerUnavailable, ValidationFailed
from tracker_client.jsonlimits import MAX_JSON_DEPTH, check_json_limits, nesting_depth_exceeds

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_MAX_ANSWER_BYTES",
    "MAX_ANSWER_DEPTH",
    "answer_too_large",
    "check_answer_depth",
    "check_json",
    "dumps",
    "encode_json",
    "encode_query",
    "loads",
]

#: The largest answer read (its body; more is refused with :class:`AnswerRefused` as it arrives,
#: never held whole): a page of 1,000 tasks with large metadata fits many times over.
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: The deepest answer parsed: a stored value (:data:`~tracker_client.jsonlimits.MAX_JSON_DEPTH`)
#: inside the few levels of a page (object, items, task, field...), with room to spare.
MAX_ANSWER_DEPTH = MAX_JSON_DEPTH + 16


def encode_query(params: Mapping[str, object | None]) -> str:
    """Build a query string the way the server can read it.

    NullTickets does not percent-decode query values on ``/tasks``, ``/artifacts`` and
    ``/runs/{id}/events``, so ``:`` in cursors must travel as-is (httpx would send ``%3A`` and the
    server would answer ``invalid_cursor``). Only characters that would break the query are
    escaped. None values are left out.
    """
    parts = []
    for key, value in params.items():
        if value is None:
            continue
        parts.append(f"{key}={quote(str(value), safe=':@-._~!$()*,;/')}")
    return "&".join(parts)


def check_json(value: Any, what: str) -> Any:
    """Refuse (``ValidationFailed`` naming ``what``) a value that is not plain JSON.

    Sets, bytes, arbitrary objects and NaN would otherwise be coerced or fail mid-request; a
    value nested past :data:`~tracker_client.jsonlimits.MAX_JSON_DEPTH` is refused here as the
    served tracker would refuse it (and before it could overflow the encoder).
    """
    check_json_limits(value, what)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{what} must be JSON: {exc}", code="invalid_json") from exc
    return value


def dumps(value: Any) -> bytes:
    """Compact, deterministic JSON bytes (a retry must send identical bytes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def encode_json(value: Any, what: str) -> bytes:
    """:func:`check_json` and :func:`dumps` in one: the bytes a request body is sent as, from one
    encoding (a worker's ``finish_many`` body was encoded twice: once to check it, once to send
    it), or the same ``ValidationFailed`` naming ``what``.

    The encoder itself refuses NaN, infinities and non-JSON types, and the UTF-8 encoding lone
    surrogates; what it would let through is checked by :func:`_plain_shape` (string keys, the
    depth limit), a walk over containers only, at about a third of the CPU of
    :func:`~tracker_client.jsonlimits.check_json_limits`' walk of every value (a worker's
    10-item ``finish_many`` body: ~60 against ~175 us). Anything refused is walked by
    :func:`~tracker_client.jsonlimits.check_json_limits`, whose refusal names what is wrong."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        raw = text.encode()
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        raw = None
    if raw is not None and _plain_shape(value):
        return raw
    check_json_limits(value, what)
    if raw is not None:  # a subclass of str, a dict...: the walk accepted it
        return raw
    try:  # refused by the encoder, not by the walk: the encoder's reason
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{what} must be JSON: {exc}", code="invalid_json") from exc
    return text.encode()


#: The containers :func:`_plain_shape` walks into (what ``json.dumps`` writes as arrays/objects
#: and :func:`~tracker_client.jsonlimits.check_json_limits` accepts).
_CONTAINERS = frozenset((dict, list, tuple))
#: The scalars it passes (None aside); a subclass of one is left to the walk.
_LEAVES = frozenset((str, int, float, bool))


def _plain_shape(value: Any) -> bool:
    """Whether ``value``, which ``json.dumps`` encoded, is also as
    :func:`~tracker_client.jsonlimits.check_json_limits` wants it: plain ``dict``/``list``/
    ``tuple`` containers, string keys only, nested at most
    :data:`~tracker_client.jsonlimits.MAX_JSON_DEPTH` levels. False: walk it to find out
    (subclasses of the containers included: the walk decides)."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    containers = _CONTAINERS
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            return False
        below: list[Any] = []
        push = below.append
        for node in level:
            if type(node) is dict:
                for key in node:
                    if type(key) is not str:
                        return False
                children = node.values()
            else:
                children = node
            for child in children:
                kind = type(child)
                if kind in containers:
                    push(child)
                elif kind not in _LEAVES and child is not None:
                    return False  # a subclass of str, int, float or a container
        level = below
    return True


def answer_too_large(what: str, limit: int) -> AnswerRefused:
    """The refusal of an answer over ``limit`` bytes (the transports raise it as it arrives)."""
    return AnswerRefused(
        f"{what}: the tracker's answer is larger than {limit} bytes (the client's"
        f" max_answer_bytes limit); not read further",
        code="answer_too_large",
    )


def loads(response: httpx.Response, what: str) -> Any:
    """Parse a success body; a body that is not JSON is a transient, broken answer, and one
    nested deeper than :data:`MAX_ANSWER_DEPTH` is :class:`AnswerRefused` (measured on the bytes
    before parsing: ``json.loads`` would overflow the stack past ~1,000 levels)."""
    raw = response.content
    check_answer_depth(raw, what)
    try:
        return json.loads(raw)
    except RecursionError as exc:  # not expected after the depth check
        raise _too_deep(what) from exc
    except ValueError as exc:
        raise _not_json(what, response.status_code) from exc


def check_answer_depth(raw: bytes, what: str) -> None:
    """Refuse (:class:`AnswerRefused`) an answer body nested deeper than
    :data:`MAX_ANSWER_DEPTH`, before anything parses it."""
    if nesting_depth_exceeds(raw, MAX_ANSWER_DEPTH):
        raise _too_deep(what)


def _not_json(what: str, status: int) -> TrackerUnavailable:
    """A success answer whose body is not JSON: a broken answer, transient."""
    return TrackerUnavailable(
        f"{what}: the tracker answered {status} with a body that is not JSON",
        code="invalid_response",
    )


def _too_deep(what: str) -> AnswerRefused:
    return AnswerRefused(
        f"{what}: the tracker's answer nests arrays/objects deeper than {MAX_ANSWER_DEPTH}"
        f" levels (limit {MAX_ANSWER_DEPTH}); not parsed",
        code="answer_too_deep",
    )
