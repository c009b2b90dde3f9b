"""Logging set-up for the CLI: rich on a TTY, journald lines under systemd, plain or JSON lines.

Records carry structured fields through ``extra``: a stable ``action`` plus ids such as
``task_id``, ``run_id``, ``role``. Every format shows them as ``key=value`` (or JSON keys).

Formats (``configure_logging(fmt=...)``):

- ``auto``: ``journal`` when stderr is the journal (``$JOURNAL_STREAM`` names stderr's
  ``st_dev:st_ino``), ``rich`` when stderr is a TTY, else ``plain``.
- ``rich``: rich's handler, for humans.
- ``plain``: one line per record: ``<ISO time> <LEVEL> <logger>: <message> key=value ...``.
- ``journal``: one line per record with a ``<N>`` syslog priority prefix that journald turns
  into the entry's priority; no timestamp (journald adds it); newlines escaped so a traceback
  stays one entry.
- ``json``: one JSON object per line.

Defence in depth: a redaction filter on the handler masks anything that looks like a lease
token (64 hex digits), ``Bearer`` credentials, and any secret registered with
:func:`add_secret` (the configured api token), in messages, tracebacks and extra fields.
Code must still never log tokens; this only limits the damage when it does.

It may touch the root logger and its handlers, stderr and ``$JOURNAL_STREAM``; it imports nothing of
the project, so every room of the worker may use it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

__all__ = [
    "FORMATS",
    "JournalFormatter",
    "JsonFormatter",
    "LogFormat",
    "PlainFormatter",
    "RedactingFilter",
    "TrackerRunLines",
    "add_secret",
    "configure_logging",
    "detect_format",
    "omit_call_sites",
    "record_fields",
    "redact",
    "registered_secrets",
    "stream_is_journal",
]

LogFormat = Literal["auto", "rich", "plain", "journal", "json"]
FORMATS: tuple[str, ...] = ("auto", "rich", "plain", "journal", "json")

REDACTED = "[REDACTED]"

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_RECORD_ATTRS = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}
# ``extra`` keys that are rendering hints, not data: rich's, and uvicorn's ``color_message`` (the
# message again with ANSI colour codes, which would put escape codes in every plain line).
_HINT_ATTRS = frozenset({"markup", "highlighter", "color_message"})
# Fields shown first, in this order; other extras follow sorted by name.
_FIELD_ORDER = ("action", "task_id", "run_id", "role", "attempt", "agent_id", "stage", "trigger")
_FIELD_SET = frozenset(_FIELD_ORDER)

_SYSLOG_PRIORITY = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4))

_HEX_TOKEN = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{64}(?![0-9A-Fa-f])")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",;]+")
_HEX_LEN = 64  # the shortest text _HEX_TOKEN can match
_BEARER_MIN = len("bearer x")  # the shortest text _BEARER can match
# Values redaction leaves as they are (``bool`` is an ``int``; exact types only: a subclass's
# ``str()`` may say anything).
_PLAIN_TYPES = frozenset({int, float, bool})
# A record's own attributes and rendering hints: what the filter and the formatters skip.
_NOT_EXTRA = _RECORD_ATTRS | _HINT_ATTRS
_SAFE_VALUE = re.compile(r"[^\s\"'=\\]+")
#: Texts the redaction filter remembers as clean: at most this many, of at most this length.
_CLEAN_MAX = 4096
_CLEAN_LEN = 256


def syslog_priority(levelno: int) -> int:
    """Map a logging level to a syslog priority (``<N>`` prefix): 2 crit .. 7 debug."""
    for threshold, priority in _SYSLOG_PRIORITY:
        if levelno >= threshold:
            return priority
    return 6 if levelno >= logging.INFO else 7


#: The extras' names in the order a line shows them, by the record's attribute names in their
#: order: a worker's records come in few shapes (a call site's ``extra`` keeps its key order), so
#: the set difference and the sort run once per shape, not per line. Bounded: emptied when full.
_SHOWN_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {}
#: The same for the redaction filter: every extra, ``_``-prefixed ones too (all are scrubbed).
_EXTRA_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {}
_KEYS_MAX = 1024


def _shown_keys(fields: dict[str, Any]) -> tuple[str, ...]:
    shape = tuple(fields)
    keys = _SHOWN_KEYS.get(shape)
    if keys is None:
        extras = fields.keys() - _NOT_EXTRA  # the extras' names (a set difference, in C)
        first = tuple(key for key in _FIELD_ORDER if key in extras)
        rest = sorted(key for key in extras - _FIELD_SET if not key.startswith("_"))
        if len(_SHOWN_KEYS) >= _KEYS_MAX:
            _SHOWN_KEYS.clear()
        keys = _SHOWN_KEYS[shape] = (*first, *rest)
    return keys


def _extra_keys(fields: dict[str, Any]) -> tuple[str, ...]:
    shape = tuple(fields)
    keys = _EXTRA_KEYS.get(shape)
    if keys is None:
        if len(_EXTRA_KEYS) >= _KEYS_MAX:
            _EXTRA_KEYS.clear()
        keys = _EXTRA_KEYS[shape] = tuple(fields.keys() - _NOT_EXTRA)
    return keys


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of a record (its ``extra``), ``action`` first, Nones dropped."""
    fields = vars(record)
    return {key: value for key in _shown_keys(fields) if (value := fields[key]) is not None}


#: Field values as a line shows them, by value: a worker's lines repeat most of theirs (its role,
#: stages, actions; a run's ids on both its lines). Bounded: emptied when it fills.
_SHOWN: dict[str, str] = {}
_SHOWN_MAX = 4096


def _format_value(value: object) -> str:
    if type(value) is int:
        return str(value)  # digits and a sign: nothing to quote
    if type(value) is str:
        shown = _SHOWN.get(value)
        if shown is None:
            if len(_SHOWN) >= _SHOWN_MAX:
                _SHOWN.clear()
            shown = _SHOWN[value] = _quoted(value)
        return shown
    return _quoted(str(value))


def _quoted(text: str) -> str:
    if text and _SAFE_VALUE.fullmatch(text):
        return text
    return json.dumps(text, ensure_ascii=False)


def _key_values(record: logging.LogRecord) -> str:
    shown = _SHOWN
    fields = vars(record)
    parts = []
    for key in _shown_keys(fields):
        value = fields[key]
        if value is None:
            continue
        kind = type(value)
        if kind is str:
            text = shown.get(value)  # most are shown already
            if text is None:
                text = _format_value(value)
        elif kind is int or kind is float:
            text = repr(value)  # digits, sign, point, exponent, inf or nan: nothing to quote
        else:
            text = _format_value(value)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def _escape_newlines(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


class _OneLineFormatter(logging.Formatter):
    """Shared body: ``logger: message key=value ...`` plus an escaped traceback."""

    def body(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        parts = [f"{record.name}: {message}"]
        fields = _key_values(record)
        if fields:
            parts.append(fields)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            parts.append(record.exc_text)
        if record.stack_info:
            parts.append(self.formatStack(record.stack_info))
        return _escape_newlines(" ".join(parts))


class PlainFormatter(_OneLineFormatter):
    """``2026-01-01T12:00:00.000Z INFO backlog_worker.daemon: claimed action=... task_id=...``."""

    def __init__(self) -> None:
        super().__init__()
        self._second: tuple[int, str] = (-1, "")  # the last second formatted, and its text

    def format(self, record: logging.LogRecord) -> str:
        """One line per record, UTC timestamp first."""
        second, cached = int(record.created), self._second
        if second != cached[0]:  # a busy worker writes many lines a second: format each once
            cached = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
            self._second = cached
        stamp = cached[1]
        millis = int(record.msecs)
        return f"{stamp}.{millis:03d}Z {record.levelname} {self.body(record)}"


class JournalFormatter(_OneLineFormatter):
    """``<6>backlog_worker.daemon: claimed action=task_claimed task_id=...`` for journald."""

    def format(self, record: logging.LogRecord) -> str:
        """One line per record with journald's ``<N>`` priority prefix."""
        return f"<{syslog_priority(record.levelno)}>{self.body(record)}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, ``action``, fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Serialise the record; non-JSON field values become strings."""
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "action": None,
        }
        for key, value in record_fields(record).items():
            data.setdefault(key, value)
            if key == "action":
                data["action"] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exc"] = record.exc_text
        return json.dumps(data, ensure_ascii=False, default=str)


class _RichFieldsFormatter(logging.Formatter):
    """Message plus dimmed ``key=value`` fields for the rich handler (time/level are rich's)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        fields = _key_values(record)
        text = f"{message}  {fields}" if fields else message
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = f"{text}\n{record.exc_text}"
        return text


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message, arguments, traceback text and extra fields.

    Attach to handlers (a logger's filters don't see records propagated from child loggers).
    The record is rewritten in place: ``msg`` becomes the redacted, fully formatted message
    and ``args`` is cleared, so every handler after this one sees the redacted text.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        """Mask the 64-hex token pattern, ``Bearer`` values, and each of ``secrets``."""
        super().__init__()
        self._lock = threading.Lock()
        # The secrets, and the texts known to hold none of them nor a token-shaped string
        # (a worker's lines repeat most of their values: its role, stages, actions, a run's
        # ids on both its lines). One tuple, replaced whole when a secret is added, so a text
        # is only ever found clean against the secrets it was checked against, whatever the
        # threads logging meanwhile.
        self._state: tuple[tuple[str, ...], dict[str, None]] = ((), {})
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Also mask ``secret`` from now on (ignored when shorter than 4 characters)."""
        # Very short strings would mask ordinary words; a real token is long.
        if len(secret) < 4:
            return
        with self._lock:
            secrets = self._state[0]
            if secret not in secrets:
                # Longest first so a secret containing another is masked whole; no text is
                # known clean of the new one yet.
                self._state = (tuple(sorted((*secrets, secret), key=len, reverse=True)), {})

    @property
    def secrets(self) -> tuple[str, ...]:
        """The exact secrets masked (longest first), without the token-shaped patterns."""
        return self._state[0]

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret masked.

        Each pattern runs only where it can match (a log line's fields are mostly short ids:
        two regex passes over each cost most of a line's redaction, docs/benchmarks.md): the
        64-hex token in a text of at least 64 characters, ``Bearer`` where the lowercased text
        holds ``bearer`` (what the case-insensitive pattern needs; none of its letters has
        another case form). A short text found clean is remembered as clean (until a secret is
        added, or :data:`_CLEAN_MAX` texts are): a worker's lines repeat most of their values."""
        secrets, clean = self._state
        if text in clean:
            return text
        original = text
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if len(text) >= _HEX_LEN:
            text = _HEX_TOKEN.sub(REDACTED, text)
        if len(text) >= _BEARER_MIN and "bearer" in text.lower():
            text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        if text is original and len(text) <= _CLEAN_LEN:
            if len(clean) >= _CLEAN_MAX:
                clean.clear()
            clean[text] = None
        return text

    def _redact_value(self, value: object) -> object:
        if isinstance(value, str):
            return self.redact(value)
        text = str(value)
        redacted = self.redact(text)
        # Keep structured values (dicts, lists) intact unless they actually held a secret.
        return value if redacted == text else redacted

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact in place; never drops a record."""
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must still be logged, not lost
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = self.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        fields = vars(record)
        clean = self._state[1]
        for key in _extra_keys(fields):
            value = fields[key]
            kind = type(value)
            if value is None or kind in _PLAIN_TYPES or (kind is str and value in clean):
                continue  # no secret fits in a number; a text found clean already
            redacted = self._redact_value(value)
            if redacted is not value:
                fields[key] = redacted
        if not hasattr(record, "action"):
            record.action = None
        return True


class TrackerRunLines(logging.Filter):
    """Drops the embedded tracker's lines that repeat a run's own (``run_start``, ``run_*``).

    In a worker process every claim, transition, retry, release and dead letter after a failed
    run is logged by the run itself (:class:`worker.run.log.RunLog`, with the outcome, trigger
    and duration); the embedded tracker, running in the same process, would log it a second
    time. Its other lines (expired leases, crash loops, requeues) stay.
    """

    #: The actions a run's own line repeats (a worker mutes them at their source too, where
    #: its rail runs in-process: :func:`worker.cli.run` setup).
    REPEATS = frozenset({"task_claimed", "task_finished", "task_released"})
    #: Dead letters decided by a run's ``fail`` (the run's ``run_failed`` line says so).
    _RUN_DEAD_LETTERS = frozenset({"max_attempts_exceeded", "permanent_failure"})

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a repeated line."""
        if not record.name.startswith("backlog_worker.tracker"):
            return True
        action = getattr(record, "action", None)
        if action in self.REPEATS:
            return False
        reason = getattr(record, "reason", None)
        return not (action == "task_dead_lettered" and reason in self._RUN_DEAD_LETTERS)


_FILTER = RedactingFilter()
_HANDLER_MARK = "_backlog_worker_handler"


def add_secret(secret: str) -> None:
    """Register a secret (e.g. the api token) to be masked by every configured handler."""
    _FILTER.add(secret)


def registered_secrets() -> tuple[str, ...]:
    """The secrets registered with :func:`add_secret` (longest first), for scrubbing what the
    worker writes elsewhere (the tracker) with the same list the log uses."""
    return _FILTER.secrets


def redact(text: str) -> str:
    """Mask token-shaped strings and every registered secret in ``text`` (for STATUS= etc.)."""
    return _FILTER.redact(text)


def omit_call_sites() -> None:
    """Records made from now on carry no call site (source file, line, function: ``pathname``
    ``(unknown file)``, ``lineno`` 0, ``funcName`` ``(unknown function)``).

    No format of this module shows one, and finding it walks the caller's frames for every
    record made, with a path comparison per frame: ~4 us of each of a run's two lines at the
    default INFO (docs/benchmarks.md). This is the Python logging HOWTO's own optimisation
    (``logging._srcfile = None``), and the whole process's: ``backlog-worker run`` sets it for
    the process it owns, as it tunes the garbage collector; an application that embeds a
    ``Worker`` keeps its logging as it set it."""
    logging._srcfile = None


def stream_is_journal(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` is the journald stream systemd connected (``$JOURNAL_STREAM``)."""
    environ = os.environ if env is None else env
    value = environ.get("JOURNAL_STREAM", "")
    device, sep, inode = value.partition(":")
    if not sep:
        return False
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(device), int(inode))
    except (OSError, ValueError, AttributeError):
        return False


def detect_format(stream: TextIO, env: Mapping[str, str] | None = None) -> str:
    """What ``auto`` means for ``stream``: ``journal``, ``rich`` (a TTY) or ``plain``."""
    if stream_is_journal(stream, env):
        return "journal"
    try:
        if stream.isatty():
            return "rich"
    except (OSError, ValueError, AttributeError):
        pass
    return "plain"


def _writes_each_line(stream: TextIO) -> bool:
    """True when a line written to ``stream`` reaches its file descriptor without a flush:
    a line-buffered text stream, or a write-through one straight over the descriptor (Python's
    own stderr, whatever it is connected to)."""
    if not isinstance(stream, io.TextIOWrapper):
        return False
    return stream.line_buffering or (
        stream.write_through and isinstance(stream.buffer, io.RawIOBase)
    )


class _LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stock stream handler without its per-line ``flush()`` where the stream writes each
    line through already (:func:`_writes_each_line`): every line still leaves the process as it
    is logged (a killed worker loses none), without a second call, its lock and a no-op flush
    for each (docs/benchmarks.md). Any other stream is flushed after every line, as before."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._flushes = not _writes_each_line(stream)

    def setStream(self, stream: TextIO) -> TextIO | None:
        """Replace the stream (logging's API), re-deciding whether each line needs a flush."""
        old = super().setStream(stream)
        self._flushes = not _writes_each_line(stream)
        return old

    def emit(self, record: logging.LogRecord) -> None:
        """Write the formatted line (logging's error handling, as the stock handler's)."""
        try:
            self.stream.write(self.format(record) + self.terminator)
            if self._flushes:
                self.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def _make_handler(fmt: str, stream: TextIO) -> logging.Handler:
    if fmt == "rich":
        from rich.console import Console
        from rich.logging import RichHandler

        rich_handler = RichHandler(
            console=Console(file=stream),
            show_path=False,
            markup=False,
            rich_tracebacks=False,  # tracebacks go through the redacted exc_text instead
        )
        rich_handler.setFormatter(_RichFieldsFormatter())
        return rich_handler
    handler = _LineHandler(stream)
    formatter: logging.Formatter
    if fmt == "journal":
        formatter = JournalFormatter()
    elif fmt == "json":
        formatter = JsonFormatter()
    else:
        formatter = PlainFormatter()
    handler.setFormatter(formatter)
    return handler


def configure_logging(
    level: int | str = "INFO",
    fmt: LogFormat | str = "auto",
    *,
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    worker: bool = False,
) -> logging.Handler:
    """Install one handler on the root logger (replacing a previous one of ours).

    ``level`` applies to the ``backlog_worker`` loggers; chatty libraries (httpx, httpcore,
    uvicorn access) stay at WARNING unless ``level`` is DEBUG. ``secrets`` are registered with
    :func:`add_secret`. ``worker``: a worker process, where the embedded tracker's lines that
    repeat a run's own are dropped (:class:`TrackerRunLines`) unless ``level`` is DEBUG.
    Returns the handler (tests read it; callers normally ignore it).
    Raises ``ValueError`` naming the bad value for an unknown format or level.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    levelno = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(levelno, int):
        raise ValueError(
            f"unknown log level {level!r}: expected DEBUG, INFO, WARNING, ERROR or CRITICAL"
        )
    out = stream if stream is not None else sys.stderr
    chosen = detect_format(out, env) if fmt == "auto" else fmt
    for secret in secrets:
        add_secret(secret)

    handler = _make_handler(chosen, out)
    handler.addFilter(_FILTER)
    if worker and levelno > logging.DEBUG:
        handler.addFilter(TrackerRunLines())
    setattr(handler, _HANDLER_MARK, chosen)

    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, None) is not None:
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(min(levelno, logging.WARNING))
    logging.getLogger("backlog_worker").setLevel(levelno)
    quiet = logging.DEBUG if levelno <= logging.DEBUG else logging.WARNING
    for name in ("httpx", "httpcore", "uvicorn.access"):
        logging.getLogger(name).setLevel(quiet)
    return handler
