"""Safe parsing of request bodies for the served tracker: one function every route uses.

``json.loads`` recurses once per nesting level and raises ``RecursionError`` around 1,000 levels;
it accepts ``NaN``/``Infinity`` (and turns ``1e999`` into infinity) and ``"\\ud800"`` (a lone
surrogate that no later UTF-8 encoding survives). Each of those used to be a 500. Here, before
anything is parsed, the nesting depth is measured on the raw bytes with a few C-speed passes (no
recursion, no per-byte Python loop); then the document is parsed refusing non-finite numbers, and
strings are checked for lone surrogates only when the bytes contain a surrogate (escaped or
encoded).

Depth: a stored value (metadata, definition, event data, store value...) may nest
:data:`~tracker_client.jsonlimits.MAX_JSON_DEPTH` levels, and the tracker enforces that per
field; a request body wraps its fields in at most :data:`BODY_WRAPPER_LEVELS` more (``{"tasks":
[{"metadata": ...}]}``), so a body deeper than both together can only be refused.

Pure: it may touch the raw bytes it is given and :mod:`tracker_client.jsonlimits`'s depth limit
only; no request, no tracker.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tracker_client.jsonlimits import MAX_JSON_DEPTH, nesting_depth_exceeds

__all__ = ["BODY_WRAPPER_LEVELS", "MAX_BODY_DEPTH", "BodyRefused", "parse_json_body"]

#: Levels a request body adds around a stored value: object, ``tasks`` array, task object.
BODY_WRAPPER_LEVELS = 3
#: Deepest request body parsed at all.
MAX_BODY_DEPTH = MAX_JSON_DEPTH + BODY_WRAPPER_LEVELS

#: A surrogate as an escape, or UTF-8-encoded (``json.loads`` decodes bytes with surrogatepass).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


class BodyRefused(ValueError):
    """The body is not acceptable JSON; ``code`` is the error code, the message says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyRefused(
            "invalid_json", f"Invalid JSON body: {text} is out of range (not a finite number)"
        )
    return value


def _constant(name: str) -> Any:
    raise BodyRefused("invalid_json", f"Invalid JSON body: {name} is not JSON")


def parse_json_body(raw: bytes) -> Any:
    """The parsed JSON document of a request body, or :class:`BodyRefused`.

    Refused: nesting deeper than :data:`MAX_BODY_DEPTH` (code ``json_too_deep``), invalid JSON
    or UTF-8, ``NaN``/``Infinity`` and numbers beyond the float range, lone surrogates.
    """
    if nesting_depth_exceeds(raw, MAX_BODY_DEPTH):
        raise BodyRefused(
            "json_too_deep",
            f"Invalid JSON body: nested too deep (a stored value may nest at most"
            f" {MAX_JSON_DEPTH} levels of arrays/objects; limit {MAX_JSON_DEPTH})",
        )
    try:
        doc = json.loads(raw, parse_constant=_constant, parse_float=_finite)
    except BodyRefused:
        raise
    except RecursionError as exc:  # not expected after the depth check; never a 500
        raise BodyRefused(
            "json_too_deep", f"Invalid JSON body: nested too deep (limit {MAX_JSON_DEPTH})"
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BodyRefused("invalid_json", f"Invalid JSON body: {exc}") from exc
    # Two byte looks first (memchr: ~6.5k instructions on a 6.5 KB finish-many body against
    # the regex's ~368k, which tries its pattern at every byte): a surrogate is either an
    # escape, which needs a backslash, or encoded, which starts with 0xED.
    if (b"\\" in raw or b"\xed" in raw) and _SURROGATE.search(raw):
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BodyRefused(
                "invalid_json",
                "Invalid JSON body: a string contains a lone surrogate (not valid UTF-8)",
            ) from exc
    return doc
