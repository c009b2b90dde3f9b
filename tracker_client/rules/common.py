"""Shared pieces of the embedded tracker: options, per-transaction context, JSON and row helpers.

Everything here runs on the database thread inside a transaction opened by :mod:`.db`.
"""

from __future__ import annotations

import json
import json.scanner
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from tracker_client import bounds
from tracker_client.errors import NotFound, TrackerCorrupt, ValidationFailed
from tracker_client.jsonlimits import MAX_JSON_DEPTH, check_json_limits, stored_too_deep
from tracker_client.models import CORRUPT_MARKER, Artifact, Run, Task
from tracker_client.rules.pipelines import PipelineCache, PipelineDef
from tracker_client.rules.retrypolicy import BUILTIN, RetryDefaults
from tracker_client.rules.statements import Statements
from tracker_client.validation import problems

if TYPE_CHECKING:
    import sqlite3

    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import Assignment, Dependency, Event

__all__ = [
    "CORRUPT_MARKER",
    "MIB",
    "CorruptRow",
    "Ctx",
    "Options",
    "artifact_from_row",
    "assignment_from_row",
    "check_limit",
    "dependencies_of",
    "dumps",
    "event_from_row",
    "list_assignments",
    "new_id",
    "run_from_row",
    "stored_json",
    "task_from_fields",
    "task_from_row",
    "uuid4_hex",
    "will_log",
]

log = logging.getLogger("backlog_worker.tracker")
#: Actions this process never logs, skipped before any work (tracker serve mutes per-task ones).
MUTED_ACTIONS: set[str] = set()


def will_log(action: str) -> bool:
    """Whether the rail writes ``action``'s line (an INFO line not muted in this process): a
    path that cannot write it (the PostgreSQL rail's one-trip claims and transitions) steps
    aside only then, not whenever the logger is at INFO (a worker at the default INFO mutes
    the rail's lines that repeat its runs' own: docs/benchmarks.md)."""
    return action not in MUTED_ACTIONS and log.isEnabledFor(logging.INFO)


MIB = 1024 * 1024
INT64_MIN = bounds.INT64_MIN
INT64_MAX = bounds.INT64_MAX
#: A statement's parameters: positional, or by name for a statement that binds one twice.
Params = tuple[Any, ...] | Mapping[str, Any]


@dataclass(frozen=True)
class Options:
    """The tracker's settings (see ``EmbeddedTracker.open``)."""

    synchronous: str = "NORMAL"
    busy_timeout_ms: int = 5000
    max_backlog_depth: int = 100_000
    role_backlog_depth: dict[str, int] = field(default_factory=dict)
    max_stale_attempts: int = 3
    idempotency_ttl_s: int = 86_400
    poll_interval_s: float = 0.05
    #: Finished tasks older than this are purged by maintenance (0 = kept forever).
    retention_days: int = 30
    #: The rail's default retry policy (built-in default overridden by ``retry_*`` options).
    retry: RetryDefaults = BUILTIN
    #: A worker draining a role gets its batch after next claimed with its reports
    #: (``tracker_client/ahead.py``; the embedded tracker's ``claim_ahead`` option).
    claim_ahead: bool = True

    def cap_for(self, role: str) -> int:
        """The effective backlog cap of ``role`` (0 = unlimited)."""
        return self.role_backlog_depth.get(role, self.max_backlog_depth)


def new_id() -> str:
    """A lowercase UUID in the UUIDv4 text layout, as NullTickets ids are, leading with the
    time (48 bits of wall-clock ms, then 74 random bits): tasks are found by a unique index on
    the id and runs by (task_id, attempt), so ids in creation order append to those b-trees
    (a claim of ten tasks created together writes one page of each instead of ten)."""
    # uuid4_hex of the text: ``str(uuid.UUID(bytes=..., version=4))`` without building the
    # object (~2.2 -> ~1.1 us; a worker makes one per report, worker/retry.py's key).
    return uuid4_hex(f"{time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF:012x}{os.urandom(10).hex()}")


#: A random hex digit -> the RFC 4122 variant digit its low two bits give (``10xx``).
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def uuid4_hex(h: str) -> str:
    """The canonical text of a version-4 UUID made of 32 hex digits ``h`` (the version and
    variant digits set as ``uuid.UUID(..., version=4)`` sets them)."""
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


#: One encoder for every stored value: ``json.dumps`` with these options builds a new
#: ``JSONEncoder`` on each call (about half the cost of encoding a small event).
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
#: Types a flat object's values may have for :func:`dumps` to skip the full walk (a float may
#: be NaN, a container may nest: those take the walk of :func:`check_json_limits`).
_FLAT_TYPES = frozenset({str, int, bool, type(None)})


def _flat_ascii(value: dict[Any, Any]) -> bool:
    """Whether ``value`` is one object of ASCII-text keys and plain scalars (ASCII text, int,
    bool, null): nested one level deep, nothing to refuse, so it passes
    :func:`check_json_limits` without the walk (the common event: ``{"step": 1}``)."""
    for key, item in value.items():
        kind = type(item)
        if type(key) is not str or kind not in _FLAT_TYPES or not key.isascii():
            return False
        if kind is str and not item.isascii():
            return False
    return True


def dumps(value: Any, what: str, *, max_bytes: int | None = None) -> str:
    """Canonical JSON text of ``value``; else ``ValidationFailed`` naming ``what``.

    Every stored JSON value goes through here, so the depth/shape limits of
    :mod:`tracker_client.jsonlimits` hold on every embedded write path (a flat object of ASCII
    text and plain scalars passes them by construction, so it skips the walk).
    """
    if type(value) is not dict or not _flat_ascii(value):
        check_json_limits(value, what)
    try:
        text: str = _ENCODE(value)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{what} is not JSON-serialisable: {exc}") from exc
    if max_bytes is not None and len(text) > max_bytes // 4 and len(text.encode()) > max_bytes:
        raise ValidationFailed(
            f"{what} is too large: {len(text.encode())} bytes of JSON, limit {max_bytes}"
        )
    return text


def check_limit(limit: int) -> None:
    """Page sizes are 1..1000."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationFailed(
            f"limit must be an integer 1..1000, got {limit!r}", code="invalid_limit"
        )


#: Rows one statement of hint ``values`` inserts at most: seven columns a row stay within the
#: 999 parameters an older SQLite binds.
VALUES_ROWS = 100
#: The text of a ``values`` statement for so many rows, by (its one-row text, rows).
_VALUES_TEXT: dict[tuple[str, int], str] = {}


def _many_values(conn: sqlite3.Connection, sql: str, rows: Sequence[Params]) -> int:
    """``INSERT ... VALUES (row)`` for every item of ``rows`` (positional parameters) as one
    statement per :data:`VALUES_ROWS` items, their values in order; the rows inserted.

    ``executemany`` steps the statement once per item, and every step gives up the GIL and
    takes it back: on a worker's database thread each take waits for the event loop to let
    go of it, so a batch's rows written one step each kept the loop and the database thread
    taking turns. One step writes them all (the same rows, in the same order, ids ascending
    as before)."""
    changed = 0
    for start in range(0, len(rows), VALUES_ROWS):
        chunk = rows[start : start + VALUES_ROWS]
        key = (sql, len(chunk))
        text = _VALUES_TEXT.get(key)
        if text is None:
            head, values, row = sql.rpartition("VALUES")
            text = head + values + " " + ", ".join([row.strip()] * len(chunk))
            if len(_VALUES_TEXT) < 1024:
                _VALUES_TEXT[key] = text
        flat = [value for item in chunk for value in cast("Sequence[Any]", item)]
        changed += int(conn.execute(text, flat).rowcount)
    return changed


class Ctx:
    """One transaction's view: the connection, the time, settings, pipelines, pending log lines."""

    __slots__ = ("conn", "logs", "memo", "now", "opts", "pipelines", "sql", "swept")

    def __init__(
        self,
        conn: sqlite3.Connection,
        now: int,
        opts: Options,
        pipelines: PipelineCache,
        sql: Statements,
    ) -> None:
        self.conn = conn
        #: The engine's statements by name (:mod:`tracker_client.rules.statements`).
        self.sql = sql
        self.now = now
        self.opts = opts
        self.pipelines = pipelines
        self.logs: list[tuple[str, str, dict[str, Any]]] = []
        #: (expired leases reclaimed, tasks dead-lettered ``crash_loop``) by this transaction;
        #: the tracker adds them to its :class:`~tracker_client.sweeps.SweepCounts` once
        #: committed (a claim's housekeeping sweeps too, not only maintenance).
        self.swept = (0, 0)
        #: What a rule worked out once for the whole transaction, by a key of its own (the
        #: same for every item of a batch: where a move lands, its event's data), read by the
        #: items after the first.
        self.memo: dict[Any, Any] = {}

    def exec(self, name: str, params: Params = ()) -> sqlite3.Cursor:
        """Run the engine's statement ``name`` with ``params``; its cursor."""
        return self.conn.execute(self.sql[name], params)

    def many(self, name: str, rows: Sequence[Params]) -> int:
        """Run statement ``name`` once per item of ``rows``, in order; the rows they changed,
        as the engine's cursor counts them. One ``executemany`` where the engine's statement
        says so (hint ``many``: SQLite's connection binds and steps it for each item in C, on
        one cursor), else one :meth:`exec` per item. An ``INSERT ... VALUES (...)`` the engine
        marks ``values`` runs as one statement of one ``VALUES`` row per item instead
        (:func:`_many_values`)."""
        sql = self.sql[name]
        if not rows:
            return 0
        if sql.hint("values") is not None and len(rows) > 1:
            return _many_values(self.conn, sql, rows)
        if sql.hint("many") is not None:
            return int(self.conn.executemany(sql, rows).rowcount)
        return sum(int(self.conn.execute(sql, row).rowcount) for row in rows)

    def all(self, name: str, params: Params = ()) -> list[sqlite3.Row]:
        """Every row statement ``name`` answers."""
        return self.conn.execute(self.sql[name], params).fetchall()

    def one(self, name: str, params: Params = ()) -> sqlite3.Row | None:
        """The first row statement ``name`` answers, or None."""
        row: sqlite3.Row | None = self.conn.execute(self.sql[name], params).fetchone()
        return row

    def scalar(self, name: str, params: Params = ()) -> Any:
        """The first column of the first row statement ``name`` answers (None if no row)."""
        row = self.conn.execute(self.sql[name], params).fetchone()
        return None if row is None else row[0]

    def pipeline(self, pid: str) -> PipelineDef:
        """A pipeline that must exist (a task refers to it)."""
        p = self.pipelines.get(self, pid)
        if p is None:
            raise NotFound(f"pipeline {pid} not found", code="pipeline_not_found")
        return p

    def task_row(self, task_id: str) -> sqlite3.Row:
        """The task row or ``NotFound``."""
        row = self.one("common.task", (task_id,))
        if row is None:
            raise NotFound(f"task {task_id} not found", code="task_not_found")
        return row

    def event(self, task_id: str, run_id: str | None, kind: str, data: Any) -> int:
        """Append an event (``data`` already validated or produced by us)."""
        cur = self.exec(
            "common.add_event", (task_id, run_id, self.now, kind, dumps(data, "event data"))
        )
        return int(cur.lastrowid or 0)

    def depth(self, role: str | None) -> int | None:
        """Waiting tasks of ``role`` now (only computed when someone will read it)."""
        if role is None:
            return None
        return int(self.scalar("common.depth", (role, self.now)))

    def will_log(self, action: str) -> bool:
        """Whether :meth:`log` would queue ``action``'s line: the hot paths ask first, so a
        rail logging at WARNING does not even format the message."""
        return will_log(action)

    def log(
        self,
        action: str,
        message: str,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        role: str | None = None,
        **more: Any,
    ) -> None:
        """Queue an INFO log line for after the commit, with the role's depth after the change."""
        if not self.will_log(action):
            return
        extra: dict[str, Any] = {"action": action, "task_id": task_id, "run_id": run_id}
        if role is not None:
            extra["role"] = role
            extra["depth"] = self.depth(role)
        extra.update(more)
        self.logs.append((action, message, extra))

    def flush_logs(self) -> None:
        """Emit the queued log lines (called after a successful commit)."""
        for _action, message, extra in self.logs:
            suffix = f" (role {extra['role']} depth {extra['depth']})" if "depth" in extra else ""
            log.info("%s%s", message, suffix, extra=extra)
        self.logs.clear()


class CorruptRow(TrackerCorrupt):
    """One stored row cannot be read (e.g. its metadata is not valid JSON): that row is bad, not
    the rail. Claims dead-letter such a task (``corrupt_row``); reads show a marker instead."""

    default_code = "corrupt_row"


#: The json module's own scanner (C) with ``json.loads``' settings: one value from an offset
#: of a text (what ``JSONDecoder`` builds for itself; typeshed types its context loosely).
_SCAN = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))


def _parse(text: str | bytes) -> Any:
    """``json.loads(text)``: a stored value as every write stores it (compact text, one value,
    nothing around it) straight from the scanner, which ``json.loads`` reaches through three
    Python calls (~0.9 against ~0.3 us for a small object); any other text through
    ``json.loads`` itself (its answer, or its error)."""
    if type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            pass  # not a value at the start: json.loads names what is wrong
        else:
            if end == len(text):
                return value
    return json.loads(text)


def _loads(text: Any, what: str, where: str, *, strict: bool) -> Any:
    """Parse a stored JSON column. A value that does not parse, or is nested deeper than any
    write stores (and than the answers' encoder can carry), is refused (``strict``: a claim
    must not hand it out) or shown as ``{"_corrupt": "..."}`` (reads keep listing the rest)."""
    if text == "{}":  # the usual metadata: no parse, nothing nested
        return {}
    try:
        if not isinstance(text, str | bytes):
            raise TypeError(f"a {type(text).__name__}, not text")
        value = _parse(text)
    except (TypeError, ValueError, RecursionError) as exc:
        return _corrupt(f"stored {what} of {where} is not valid JSON ({exc})", strict, exc)
    if stored_too_deep(text, value):
        # Parses, but no answer holding it could be encoded (docs/guarantees/edge-cases.md).
        return _corrupt(
            f"stored {what} of {where} is nested deeper than {MAX_JSON_DEPTH} levels "
            "(the most a value may be)",
            strict,
            None,
        )
    return value


def _corrupt(message: str, strict: bool, cause: BaseException | None) -> Any:
    """``CorruptRow`` when ``strict``, else the marker object (and a warning)."""
    if strict:
        raise CorruptRow(message) from cause
    log.warning("%s; shown as a marker", message, extra={"action": "corrupt_row"})
    return {CORRUPT_MARKER: message}


def _json(text: str | None, what: str, where: str) -> Any:
    return None if text is None else _loads(text, what, where, strict=False)


def task_from_row(row: sqlite3.Row, *, strict: bool = False) -> Task:
    """A Task model from a ``tasks`` row.

    A row that cannot be read is ``CorruptRow`` when ``strict`` (claims); otherwise its bad
    metadata reads as a marker object, so one bad row does not break a list.
    """
    where = f"task {row['id']}"
    try:
        return _task(row, _loads(row["metadata"], "metadata", where, strict=strict))
    except ValidationError as exc:
        problem = problems(exc)[0].message
        raise CorruptRow(f"stored row of {where} cannot be read: {problem}") from exc


def _task(row: sqlite3.Row, metadata: Any) -> Task:
    # The row as a dict, its parsed metadata in place: a ``sqlite3.Row`` looks a name up by a
    # case-insensitive scan of its columns, so twenty lookups cost more than the validation.
    # The model ignores the columns that are not its fields (lease, role, seq ...); a row
    # without ``parent_id`` (a rail before the subtasks column) reads as None, the default.
    fields = dict(zip(row.keys(), row, strict=True))
    fields["metadata"] = metadata
    return Task.model_validate(fields)


def task_from_fields(fields: Mapping[str, Any], *, strict: bool = False) -> Task:
    """:func:`task_from_row` of a ``tasks`` row already made a dict (a cursor answering dicts:
    the claim's scan, whose rows are read by name a dozen times more), left unchanged."""
    where = f"task {fields['id']}"
    try:
        metadata = _loads(fields["metadata"], "metadata", where, strict=strict)
        return Task.model_validate({**fields, "metadata": metadata})
    except ValidationError as exc:
        problem = problems(exc)[0].message
        raise CorruptRow(f"stored row of {where} cannot be read: {problem}") from exc


def run_from_row(row: sqlite3.Row) -> Run:
    """A Run model from a ``runs`` row."""
    return Run.model_validate(
        {
            "id": row["id"],
            "task_id": row["task_id"],
            "attempt": row["attempt"],
            "status": row["status"],
            "agent_id": row["agent_id"],
            "agent_role": row["agent_role"],
            "started_at_ms": row["started_at_ms"],
            "ended_at_ms": row["ended_at_ms"],
            "error": row["error"],
            "usage": _json(row["usage"], "usage", f"run {row['id']}"),
        }
    )


def event_from_row(row: sqlite3.Row) -> Event:
    """An Event model from an ``events`` row."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import Event

    return Event.model_validate(
        {
            "id": row["id"],
            "run_id": row["run_id"],
            "ts_ms": row["ts_ms"],
            "kind": row["kind"],
            "data": _loads(row["data"], "data", f"event {row['id']}", strict=False),
            "task_id": row["task_id"],
        }
    )


def artifact_from_row(row: sqlite3.Row) -> Artifact:
    """An Artifact model from an ``artifacts`` row."""
    return Artifact.model_validate(
        {
            "id": row["id"],
            "task_id": row["task_id"],
            "run_id": row["run_id"],
            "created_at_ms": row["created_at_ms"],
            "kind": row["kind"],
            "uri": row["uri"],
            "sha256": row["sha256"],
            "size_bytes": row["size_bytes"],
            "meta": _json(row["meta"], "meta", f"artifact {row['id']}"),
        }
    )


def assignment_from_row(row: sqlite3.Row) -> Assignment:
    """An Assignment model from an ``assignments`` row."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import Assignment

    return Assignment(
        task_id=row["task_id"],
        agent_id=row["agent_id"],
        assigned_by=row["assigned_by"],
        active=bool(row["active"]),
        created_at_ms=row["created_at_ms"],
        updated_at_ms=row["updated_at_ms"],
    )


#: A write operation run inside a transaction.
WriteFn = Callable[[Ctx], Any]


def stored_json(text: Any, what: str, where: str) -> Any:
    """A stored JSON value for a read: a marker object (and a warning) when it does not parse."""
    return _loads(text, what, where, strict=False)


def dependencies_of(ctx: Ctx, task_id: str) -> list[Dependency]:
    """The task's dependencies, each with whether its upstream is resolved now: terminal and
    not dead-lettered (a dead-lettered or cancelled upstream never resolves)."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import Dependency

    rows = ctx.all("common.dependencies", (task_id,))
    return [Dependency(depends_on_task_id=r[0], resolved=bool(r[1])) for r in rows]


def list_assignments(ctx: Ctx, task_id: str) -> list[Assignment]:
    """All assignments of a task, inactive ones included, oldest first."""
    rows = ctx.all("common.assignments", (task_id,))
    return [assignment_from_row(r) for r in rows]
