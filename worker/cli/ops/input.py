"""Reading operator input: JSON/TOML files, JSON flags, JSON-lines task files, deadlines.

Every function raises :class:`~worker.cli.ops.common.OpsError` with exit code 2 and a message
naming the file, line and problem; nothing here talks to a tracker.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from worker.cli.ops.common import EXIT_USAGE, OpsError
from worker.config.sources import describe_validation  # one formatter for config and input

__all__ = [
    "describe_validation",
    "parse_deadline",
    "parse_json_flag",
    "read_jsonl",
    "read_structured_file",
    "read_text",
]


def read_text(path: Path | str, what: str) -> str:
    """The text of ``path`` (``-`` = stdin); ``OpsError`` naming ``what`` when it can't be read."""
    if str(path) == "-":
        return sys.stdin.read()
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OpsError(f"{what} {str(p)!r} does not exist", EXIT_USAGE) from None
    except IsADirectoryError:
        raise OpsError(f"{what} {str(p)!r} is a directory", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise OpsError(f"{what} {str(p)!r} is not UTF-8 text", EXIT_USAGE) from None
    except OSError as exc:
        raise OpsError(f"{what} {str(p)!r} cannot be read: {exc.strerror}", EXIT_USAGE) from None


def _json_error(exc: json.JSONDecodeError) -> str:
    return f"{exc.msg} at line {exc.lineno} column {exc.colno}"


def read_structured_file(path: Path | str, what: str) -> Any:
    """Parse a JSON or TOML file (by suffix; ``.toml`` is TOML, anything else JSON)."""
    text = read_text(path, what)
    if str(path).lower().endswith(".toml"):
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise OpsError(f"{what} {str(path)!r} is not valid TOML: {exc}", EXIT_USAGE) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OpsError(
            f"{what} {str(path)!r} is not valid JSON: {_json_error(exc)}", EXIT_USAGE
        ) from None


def parse_json_flag(value: str, flag: str) -> Any:
    """Parse the JSON text given to ``flag``."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise OpsError(f"{flag} is not valid JSON: {_json_error(exc)}", EXIT_USAGE) from None


def read_jsonl(path: Path | str, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank, non-``#`` line of a JSON-lines file."""
    text = read_text(path, what)
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise OpsError(
                f"{what} {str(path)!r} line {lineno}: invalid JSON: {exc.msg} (column {exc.colno})",
                EXIT_USAGE,
            ) from None
        if not isinstance(obj, dict):
            raise OpsError(
                f"{what} {str(path)!r} line {lineno}: expected a JSON object, "
                f"got {type(obj).__name__}",
                EXIT_USAGE,
            )
        yield lineno, obj


def parse_deadline(value: str) -> int:
    """An absolute deadline as epoch ms: ISO 8601 (local time when naive) or epoch ms digits."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise OpsError(
            f"--expires-at {value!r} is neither an ISO 8601 time (2026-01-31T18:00) "
            "nor epoch milliseconds",
            EXIT_USAGE,
        ) from None
    return int(moment.timestamp() * 1000)
