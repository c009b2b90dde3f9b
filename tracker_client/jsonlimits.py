"""Depth and shape limits of JSON values a tracker stores (metadata, definitions, event data...).

A value nested hundreds of levels deep is accepted by ``json.dumps`` and then breaks every reader
of it: pydantic refuses to serialise past its depth limit (every list endpoint answers 500 from
then on) and ``json.loads`` overflows the stack at about 1,000 levels. So every write path checks
the value first, with one iterative walk (no recursion, so the check itself cannot overflow), and
refuses it with :class:`~tracker_client.errors.ValidationFailed` naming the limit.

Raw JSON text is measured before it is parsed by :func:`nesting_depth_exceeds` (a few C-speed
passes, no recursion): the served tracker's request bodies and the HTTP client's answers.

The walk also refuses what is not portable JSON: NaN and infinities (not JSON at all), strings
or keys with lone surrogates (not encodable as UTF-8), non-string object keys and non-JSON types.

Pure: it may use :mod:`tracker_client.errors` only; the embedded tracker, the HTTP transport and the
served tracker's body parser call it.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from tracker_client.errors import ValidationFailed

__all__ = ["MAX_JSON_DEPTH", "check_json_limits", "nesting_depth_exceeds", "stored_too_deep"]

#: Deepest nesting of arrays/objects a stored value may have: ``[]`` and ``{}`` are depth 1.
MAX_JSON_DEPTH = 64

_SCALARS = (bool, int, type(None))


def _check_str(text: str, what: str, role: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationFailed(
            f"{what}: {role} contains a lone surrogate (not valid UTF-8 JSON)",
            code="invalid_json",
        ) from exc


def check_json_limits(value: Any, what: str) -> None:
    """Refuse ``value`` unless it is plain JSON nested at most :data:`MAX_JSON_DEPTH` levels.

    ``what`` names the field in the error (``"metadata"``, ``"event data"``...). Accepts what
    ``json.loads`` produces (dict with str keys, list, str, int, float, bool, None) plus tuples.
    Raises :class:`ValidationFailed` (code ``json_too_deep`` or ``invalid_json``); returns None.
    """
    # Each stack entry: (container, its depth). Scalars at the top are depth 0.
    if isinstance(value, _SCALARS):
        return
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, _SCALARS):
            continue
        if isinstance(node, str):
            _check_str(node, what, "a string")
            continue
        if isinstance(node, float):
            if not math.isfinite(node):
                raise ValidationFailed(
                    f"{what}: {node!r} is not a JSON number (NaN and infinities are refused)",
                    code="invalid_json",
                )
            continue
        if isinstance(node, dict):
            children: Any = node.values()
            for key in node:
                if not isinstance(key, str):
                    raise ValidationFailed(
                        f"{what}: object keys must be strings, got {type(key).__name__}",
                        code="invalid_json",
                    )
                _check_str(key, what, "an object key")
        elif isinstance(node, list | tuple):
            children = node
        else:
            raise ValidationFailed(
                f"{what}: {type(node).__name__} is not a JSON value", code="invalid_json"
            )
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise ValidationFailed(
                f"{what} is nested too deep: more than {MAX_JSON_DEPTH} levels of arrays/objects"
                f" (limit {MAX_JSON_DEPTH})",
                code="json_too_deep",
            )
        for child in children:
            if not isinstance(child, _SCALARS):
                stack.append((child, depth))


def stored_too_deep(text: str | bytes, value: Any) -> bool:
    """True if a stored value (``value``, parsed from ``text``) nests arrays/objects deeper than
    :data:`MAX_JSON_DEPTH`: no write stores one, so it was restored or edited by hand, and the
    encoders of the readers (pydantic stops at ~255 levels) would fail every answer holding it.
    Readers treat it as a corrupt row (docs/guarantees/edge-cases.md). A text with at most that
    many brackets is passed at once; otherwise one iterative walk of ``value``."""
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        brackets = text.count(b"[") + text.count(b"{")
    if brackets <= MAX_JSON_DEPTH:
        return False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth + 1 > MAX_JSON_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


#: A backslash and the byte it escapes (inside a JSON string: the only place one is valid).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
#: A string once its escapes are gone and only quotes and brackets are left of the text.
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKETS_OR_QUOTES = bytes(b for b in range(256) if b not in b'[]{}"')
_RUNS = re.compile(rb"[\[{]+|[\]}]+")
#: Peeling rounds before the run loop (after k rounds, the loop sees at most len/(k+1) runs).
_PEEL_ROUNDS = 16


@functools.lru_cache(maxsize=128)
def _open_run(limit: int) -> re.Pattern[bytes]:
    """More than ``limit`` opening brackets in a row: deeper than ``limit`` for sure."""
    return re.compile(rb"[\[{]{%d}" % (limit + 1))


def nesting_depth_exceeds(raw: bytes, limit: int) -> bool:
    """True if the JSON text ``raw`` nests arrays/objects more than ``limit`` levels deep.

    Never recurses, and costs a few C-speed passes over the bytes plus a loop over runs of
    brackets: a body with at most ``limit`` brackets is accepted at once; otherwise escapes are
    cut out, then all but quotes and brackets, then the strings (only brackets by then); more
    than ``limit`` opening brackets in a row is too deep.
    Up to :data:`_PEEL_ROUNDS` rounds then remove the innermost pairs (each round peels exactly
    one level off every branch, and dissolves the short up-and-down patterns that would make
    the run loop long), while they remove many; what is left is measured run by run (a run of
    ``[``/``{`` goes down, a run of ``]``/``}`` comes back up). A 16 MiB body costs well under
    a second even when built against this walk.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)  # so an escaped quote ends no string
    # Quotes and brackets only (C speed). Two quotes in a row are an empty string or the end
    # of one string and the start of the next: either way no bracket is lost by dropping them
    # and the quotes after them keep their pairing, so most strings go by ``replace``; the
    # rest are cut out of that short text, and a quote left unpaired (a text that is no JSON).
    quoted = raw.translate(None, _NOT_BRACKETS_OR_QUOTES).replace(b'""', b"")
    brackets = _STRING.sub(b"", quoted).translate(None, b'"')
    if _open_run(limit).search(brackets):
        return True
    for _ in range(_PEEL_ROUNDS):
        if not brackets or limit < 0:
            # Every round that changed something removed one level: empty after k rounds is
            # depth k, and limit counts down from the original limit by one per round.
            return limit < 0
        if len(brackets) <= 2 * limit:
            return False  # depth <= half the brackets
        # Mark this round's innermost pairs first, so a pair they enclose waits for its round.
        peeled = brackets.replace(b"[]", b"\0").replace(b"{}", b"\0").translate(None, b"\0")
        if len(peeled) == len(brackets):
            break  # mismatched brackets: nothing more to peel
        few = len(brackets) - len(peeled) < len(brackets) // 16
        brackets = peeled
        limit -= 1  # one level is gone from every branch
        if few:
            break  # few leaves: few runs too, the run loop is the cheaper way on
    if limit < 0:
        return True  # more levels were peeled than the limit allows
    depth = 0
    for run in _RUNS.finditer(brackets):
        if run.group()[0] in b"[{":
            depth += len(run.group())
            if depth > limit:
                return True
        else:
            depth -= len(run.group())
    return False
