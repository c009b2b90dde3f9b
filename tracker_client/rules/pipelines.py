"""Pipeline definitions: the model, validation (with an error naming the broken rule) and a cache.

A pipeline changes by versions (``pipeline apply``: :mod:`tracker_client.rules.evolve`,
docs/operate/pipelines.md): each version's definition is immutable once stored, so every
process may cache a parsed version forever. Which version is current is read from the
pipeline's row (one small read, ``pipelines.version``) the first time a transaction asks, since
another process may have applied a newer one.

The definition's model is :class:`PipelineDef`; a new top-level setting is a key of
:data:`TOP_KEYS`, a field here filled by :func:`validate_definition`, and (when it must reach
waiting tasks) a step of the apply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from tracker_client.errors import ValidationFailed
from tracker_client.jsonlimits import check_json_limits
from tracker_client.models import Pipeline
from tracker_client.rules.retrypolicy import parse_retry

if TYPE_CHECKING:
    import sqlite3

    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import AvailableTransition

__all__ = [
    "MAX_DEFINITION_BYTES",
    "PipelineCache",
    "PipelineDef",
    "StateDef",
    "TransitionDef",
    "validate_definition",
]


class StateDef(NamedTuple):
    """One state of a pipeline."""

    name: str
    agent_role: str | None
    terminal: bool


class TransitionDef(NamedTuple):
    """One transition, in definition order."""

    from_state: str
    to_state: str
    trigger: str
    instructions: str | None
    required_gates: tuple[str, ...]


@dataclass(frozen=True)
class PipelineDef:
    """A validated pipeline definition."""

    id: str
    name: str
    initial: str
    states: dict[str, StateDef]
    transitions: tuple[TransitionDef, ...]
    default_queue_ttl_ms: int | None
    created_at_ms: int
    definition: dict[str, Any] = field(repr=False)
    #: The fields of the rail's default retry policy this pipeline overrides (its ``retry``).
    retry: dict[str, Any] = field(default_factory=dict)
    #: Its budgets for agent loops (docs/operate/budgets.md): the keys its ``budgets`` gives.
    budgets: dict[str, Any] = field(default_factory=dict)
    #: Which version of the pipeline this definition is (1: as created).
    version: int = 1

    def find(self, stage: str, trigger: str) -> TransitionDef | None:
        """The first transition (definition order) from ``stage`` on ``trigger``."""
        for t in self.transitions:
            if t.from_state == stage and t.trigger == trigger:
                return t
        return None

    def triggers_from(self, stage: str) -> list[str]:
        """Triggers allowed from ``stage``, in definition order."""
        return [t.trigger for t in self.transitions if t.from_state == stage]

    def available(self, stage: str) -> list[AvailableTransition]:
        """The transitions out of ``stage`` as the API lists them."""
        # a worker never builds it: created on first use (tracker_client.cold_models)
        from tracker_client.models import AvailableTransition

        return [
            AvailableTransition(
                trigger=t.trigger, to=t.to_state, required_gates=list(t.required_gates)
            )
            for t in self.transitions
            if t.from_state == stage
        ]

    def role_of(self, stage: str) -> str | None:
        """The agent role of ``stage`` (None if it has none or is unknown)."""
        state = self.states.get(stage)
        return state.agent_role if state else None

    def is_terminal(self, stage: str) -> bool:
        """Whether ``stage`` is a terminal state (unknown stages are not)."""
        state = self.states.get(stage)
        return bool(state and state.terminal)

    def model(self) -> Pipeline:
        """The public model."""
        return Pipeline(
            id=self.id,
            name=self.name,
            definition=self.definition,
            created_at_ms=self.created_at_ms,
        )


def _fail(rule: str) -> ValidationFailed:
    return ValidationFailed(f"pipeline definition: {rule}", code="validation_failed")


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


#: The keys a definition, a state and a transition may have (NullTickets' plus our extensions).
TOP_KEYS = ("initial", "states", "transitions", "default_queue_ttl_ms", "retry", "budgets")
STATE_KEYS = ("agent_role", "description", "terminal", "workflow_id", "human")
TRANSITION_KEYS = ("from", "to", "trigger", "instructions", "required_gates")


def _no_unknown_keys(raw: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    """A misspelt key (``agent_rol``) would be ignored and its task wait forever: refuse it."""
    unknown = [k for k in raw if k not in known]
    if unknown:
        key = str(unknown[0])
        import difflib  # an error's path only (issue 31, memory)

        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _fail(f"{where}: unknown key {key!r}{hint}; known keys: {', '.join(known)}")


def _known_keys(definition: Mapping[str, Any]) -> None:
    """Refuse a misspelt key before any rule reads the keys: ``intial`` is named as a typo of
    ``initial``, not reported as a missing ``initial`` (states and transitions too, where they
    have the shape to hold keys; the shape itself is the rules' to check)."""
    _no_unknown_keys(definition, TOP_KEYS, "definition")
    states = definition.get("states")
    for sname, sdef in states.items() if isinstance(states, Mapping) else ():
        if isinstance(sdef, Mapping):
            _no_unknown_keys(sdef, STATE_KEYS, f"state {sname!r}")
    transitions = definition.get("transitions")
    for i, tdef in enumerate(transitions if isinstance(transitions, list) else (), start=1):
        if isinstance(tdef, Mapping):
            _no_unknown_keys(tdef, TRANSITION_KEYS, f"transition #{i}")


def _strict_rules(
    definition: Mapping[str, Any], states: dict[str, StateDef], transitions: list[TransitionDef]
) -> None:
    """The rules a new definition must also keep (stored ones are read without them); its
    keys were checked first (:func:`_known_keys`)."""
    for t in transitions:
        if states[t.from_state].terminal:
            raise _fail(
                f"transition {t.from_state} -> {t.to_state} ({t.trigger}) leaves terminal state "
                f"{t.from_state!r}: a terminal state is finished and has no way out"
            )
    for s in states.values():
        human = definition["states"][s.name].get("human", False)
        if not isinstance(human, bool):
            raise _fail(f"state {s.name!r}: 'human' must be true or false")
        if human and (s.terminal or s.agent_role is not None):
            raise _fail(
                f"state {s.name!r} is a human step: it has no agent_role and is not terminal "
                "(a person moves the task on with `backlog-worker task transition`)"
            )
        if not s.terminal and s.agent_role is None and not human:
            raise _fail(
                f"state {s.name!r} is not terminal and has no agent_role: no worker can claim a "
                "task there, so it could never leave (give it an agent_role, make it terminal, "
                'or mark it a human step with "human": true)'
            )


#: The largest new pipeline definition, as compact JSON (UTF-8 bytes): states, transitions and
#: their instructions fit many times over; every claim reads the definition, so it stays small.
MAX_DEFINITION_BYTES = 1024 * 1024


def _check_size(definition: Any) -> None:
    size = len(json.dumps(definition, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_DEFINITION_BYTES:
        raise ValidationFailed(
            f"pipeline definition is too large: {size} bytes of JSON, limit"
            f" {MAX_DEFINITION_BYTES} (1 MiB)",
            code="definition_too_large",
        )


def validate_definition(
    definition: Any,
    *,
    pid: str = "",
    name: str = "",
    created_at_ms: int = 0,
    strict: bool = True,
    version: int = 1,
) -> PipelineDef:
    """Check every rule of a pipeline definition; ``ValidationFailed`` names the broken one.

    ``strict`` (every new definition) adds the rules older versions did not check: no unknown
    keys, no transition out of a terminal state, a role for every non-terminal state. Stored
    definitions are read with ``strict=False``, so a rail made before keeps working.
    """
    check_json_limits(definition, "pipeline definition")
    if strict:
        _check_size(definition)
    if not isinstance(definition, Mapping):
        raise _fail(f"must be a JSON object, got {type(definition).__name__}")
    if strict:
        _known_keys(definition)
    initial = definition.get("initial")
    if not _nonempty_str(initial):
        raise _fail("'initial' must be a non-empty string naming a state")
    states_raw = definition.get("states")
    if not isinstance(states_raw, Mapping) or not states_raw:
        raise _fail("'states' must be a non-empty object of state objects")
    states: dict[str, StateDef] = {}
    for sname, sdef in states_raw.items():
        where = f"state {sname!r}"
        if not _nonempty_str(sname):
            raise _fail(f"{where}: state names must be non-empty strings")
        if not isinstance(sdef, Mapping):
            raise _fail(f"{where}: must be an object, got {type(sdef).__name__}")
        role = sdef.get("agent_role")
        if role is not None and not isinstance(role, str):
            raise _fail(f"{where}: 'agent_role' must be a string")
        terminal = sdef.get("terminal", False)
        if terminal is None:
            terminal = False
        if not isinstance(terminal, bool):
            raise _fail(f"{where}: 'terminal' must be true or false")
        desc = sdef.get("description")
        if desc is not None and not isinstance(desc, str):
            raise _fail(f"{where}: 'description' must be a string")
        states[sname] = StateDef(name=sname, agent_role=role or None, terminal=terminal)
    if initial not in states:
        raise _fail(f"'initial' state {initial!r} is not defined in 'states'")
    trans_raw = definition.get("transitions")
    if not isinstance(trans_raw, list) or not trans_raw:
        raise _fail("'transitions' must be a non-empty list of transition objects")
    transitions: list[TransitionDef] = []
    seen: set[tuple[str, str]] = set()
    for i, tdef in enumerate(trans_raw, start=1):
        if not isinstance(tdef, Mapping):
            raise _fail(f"transition #{i}: must be an object, got {type(tdef).__name__}")
        src, dst, trig = tdef.get("from"), tdef.get("to"), tdef.get("trigger")
        where = f"transition #{i} ({src} -> {dst})"
        for key, value in (("from", src), ("to", dst), ("trigger", trig)):
            if not _nonempty_str(value):
                raise _fail(f"{where}: {key!r} must be a non-empty string")
        assert isinstance(src, str)
        assert isinstance(dst, str)
        assert isinstance(trig, str)
        if src not in states:
            raise _fail(f"{where}: 'from' state {src!r} is not defined")
        if dst not in states:
            raise _fail(f"{where}: 'to' state {dst!r} is not defined")
        if (src, trig) in seen:
            raise _fail(f"{where}: duplicate trigger {trig!r} from state {src!r}")
        seen.add((src, trig))
        instr = tdef.get("instructions")
        if instr is not None and not isinstance(instr, str):
            raise _fail(f"{where}: 'instructions' must be a string")
        gates = tdef.get("required_gates")
        if gates is None:
            gates = []
        if not isinstance(gates, list) or not all(isinstance(g, str) for g in gates):
            raise _fail(f"{where}: 'required_gates' must be a list of strings")
        transitions.append(TransitionDef(src, dst, trig, instr, tuple(gates)))
    if not any(s.terminal for s in states.values()):
        raise _fail('no terminal state: at least one state needs "terminal": true')
    sources = {t.from_state for t in transitions}
    for s in states.values():
        if not s.terminal and s.name not in sources:
            raise _fail(f"state {s.name!r} is not terminal and has no outgoing transition")
    ttl = definition.get("default_queue_ttl_ms")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0):
        raise _fail("'default_queue_ttl_ms' must be a positive integer (milliseconds)")
    retry: dict[str, Any] = {}
    if definition.get("retry") is not None:
        retry = parse_retry(definition["retry"], "'retry'", _fail)
        dls = retry.get("dead_letter_stage")
        if dls is not None and dls not in states:
            raise _fail(f"'retry': 'dead_letter_stage' {dls!r} is not defined in 'states'")
    budgets: dict[str, Any] = {}
    if definition.get("budgets") is not None:  # budgets (docs/operate/budgets.md)
        from tracker_client.rules.budgets import parse_limits  # imports us

        budgets = parse_limits(definition["budgets"], "'budgets'", _fail)
    if strict:
        _strict_rules(definition, states, transitions)
    try:
        plain = json.loads(json.dumps(definition, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise _fail(f"not JSON-serialisable ({exc})") from exc
    return PipelineDef(
        id=pid,
        name=name,
        initial=initial,
        states=states,
        transitions=tuple(transitions),
        default_queue_ttl_ms=ttl,
        created_at_ms=created_at_ms,
        definition=plain,
        retry=retry,
        budgets=budgets,
        version=version,
    )


class Reads(Protocol):
    """What the cache reads through: a transaction's statements by name (a
    :class:`~tracker_client.rules.common.Ctx`; this module is below it, so it names the face)."""

    def one(self, sql: str, params: Any = ()) -> Any:
        """The first row statement ``sql`` answers, or None."""

    def all(self, name: str, params: Any = ()) -> list[Any]:
        """Every row statement ``name`` answers."""

    def scalar(self, sql: str, params: Any = ()) -> Any:
        """The first column of the first row, or None."""


#: How old a look at a pipeline's current version a task's creation may use (ms).
RECENT_MS = 1_000


class PipelineCache:
    """Parsed pipeline versions by (id, version), and which version is current.

    A version never changes once stored, so a parsed one is kept for good; the current version
    of a pipeline is read from its row once per transaction (the first :meth:`get` of it), so
    an apply committed by another process is seen by the next transaction.
    """

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], PipelineDef] = {}
        self._latest: dict[str, PipelineDef] = {}
        #: (the transaction, the pipelines whose current version it has read).
        self._fresh: tuple[object, frozenset[str]] = (None, frozenset())
        #: When (the rail's clock, ms) each pipeline's current version was last read for
        #: :meth:`recent`.
        self._checked_at: dict[str, int] = {}

    def cached(self, pid: str) -> PipelineDef | None:
        """The newest version of ``pid`` this process parsed, else None (never reads the
        database)."""
        return self._latest.get(pid)

    def recent(self, db: Reads, pid: str, now_ms: int) -> PipelineDef | None:
        """The current version of ``pid`` as :meth:`get` read it at most :data:`RECENT_MS` ago
        (by the rail's clock), else :meth:`get`. For a task's creation: the task records the
        version it enters under and is judged by it, so one created under a version another
        process replaced a moment ago is still consistent (it lands in the current version at
        its first move); the look at the pipeline's row is saved on most creates."""
        hit = self._latest.get(pid)
        checked = self._checked_at.get(pid)
        if hit is not None and checked is not None and 0 <= now_ms - checked <= RECENT_MS:
            return hit
        found = self.get(db, pid)
        if found is not None:
            self._checked_at[pid] = now_ms
        return found

    def applied(self) -> None:
        """This process committed an apply: every pipeline's version is read again."""
        self._checked_at = {}
        self._fresh = (None, frozenset())

    def get(self, db: Reads, pid: str) -> PipelineDef | None:
        """The current version of pipeline ``pid``, or None (``db``: the transaction's
        :class:`~.common.Ctx`)."""
        seen, fresh = self._fresh
        hit = self._latest.get(pid)
        if hit is not None and seen is db and pid in fresh:
            return hit
        version = db.scalar("pipelines.version", (pid,))
        if version is None:
            return None
        self._fresh = (db, (fresh if seen is db else frozenset()) | {pid})
        found = self._by_key.get((pid, int(version)))
        if found is not None:
            self._latest[pid] = found
            return found
        row = db.one("pipelines.get", (pid,))
        return None if row is None else self._remember(row)

    def at(self, db: Reads, pid: str, version: int | None) -> PipelineDef | None:
        """Version ``version`` of pipeline ``pid`` (None: the current one), or None."""
        if version is None:
            return self.get(db, pid)
        found = self._by_key.get((pid, version))
        if found is not None:
            return found
        row = db.one("pipelines.at", (pid, version))
        if row is None:
            current = self.get(db, pid)  # a pipeline never applied has only its row
            return current if current is not None and current.version == version else None
        return self._remember(row, latest=False)

    def all(self, db: Reads) -> list[PipelineDef]:
        """The current version of every pipeline, in creation order (loads ones other processes
        created or changed)."""
        out: list[PipelineDef] = []
        for head in db.all("pipelines.heads"):  # ids and versions: definitions only if new
            found = self._by_key.get((head["id"], int(head["version"])))
            if found is None:
                row = db.one("pipelines.get", (head["id"],))
                if row is None:
                    continue
                found = self._remember(row)
            out.append(found)
        return out

    def _remember(self, row: sqlite3.Row, *, latest: bool = True) -> PipelineDef:
        parsed = validate_definition(
            json.loads(row["definition"]),
            pid=row["id"],
            name=row["name"],
            created_at_ms=row["created_at_ms"],
            strict=False,
            version=int(row["version"]),
        )
        self._by_key[(parsed.id, parsed.version)] = parsed
        if latest:
            self._latest[parsed.id] = parsed
        return parsed

    def forget(self, pid: str) -> None:
        """Drop ``pid`` (used when its creating transaction rolled back)."""
        self._latest.pop(pid, None)
        for key in [k for k in self._by_key if k[0] == pid]:
            del self._by_key[key]
        self._fresh = (None, frozenset())
