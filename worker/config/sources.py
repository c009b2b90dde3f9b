"""Where each configuration value came from, so that an error names its real source.

A value comes from the TOML file, a ``BACKLOG_WORKER_*`` environment variable or a command-line
flag; an error about it says which (``worker.toml: [worker] concurrency: ...``,
``BACKLOG_WORKER_WORKER__CONCURRENCY: ... (environment)``, ``--concurrency: ...``) instead of
blaming the file for what the environment said. The environment is parsed here rather than by
pydantic-settings so that a misspelled variable is refused by its own name (with the closest real
name, via :func:`difflib.get_close_matches`) instead of being ignored or reported as a file key.

No I/O: it is handed the file's values and the environment; it may use pydantic and
:mod:`tracker_client.validation` (the one formatter) only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args, get_origin

from pydantic import BaseModel, ValidationError

from tracker_client import validation

__all__ = [
    "ENV_PREFIX",
    "FLAG_NAMES",
    "NOT_SETTINGS",
    "SHORT_FORMS",
    "EnvLayers",
    "Origin",
    "Sources",
    "describe_validation",
    "file_origin",
    "json_place",
    "parse_env",
    "role_names",
    "toml_place",
]

ENV_PREFIX = "BACKLOG_WORKER_"
#: Short environment names, below the nested ones (``BACKLOG_WORKER_TRACKER__URL`` wins).
SHORT_FORMS: Mapping[str, tuple[str, ...]] = {
    "BACKLOG_WORKER_API_TOKEN": ("tracker", "api_token"),
    "BACKLOG_WORKER_TRACKER_URL": ("tracker", "url"),
    "BACKLOG_WORKER_TRACKER_URL_FILE": ("tracker", "url_file"),
    "BACKLOG_WORKER_AGENT_ID": ("worker", "agent_id"),
}
#: ``BACKLOG_WORKER_*`` variables that are not settings (read by the CLI, the systemd unit, the
#: error handler): accepted, never reported as typos.
NOT_SETTINGS = frozenset(
    {
        "BACKLOG_WORKER_CONFIG",
        "BACKLOG_WORKER_INSTANCE",
        "BACKLOG_WORKER_DEBUG",
        "BACKLOG_WORKER_ALLOWED_HOSTS",
    }
)
#: The command-line flag that sets a dotted key (``run``/``check`` and the operator commands).
FLAG_NAMES: Mapping[str, str] = {
    "tracker.url": "--tracker",
    "tracker.api_token": "--token",
    "tracker.api_token_file": "--token-file",
    "tracker.url_file": "--tracker-file",
    "worker.concurrency": "--concurrency",
    "worker.agent_id": "--agent-id",
    "worker.drain": "--drain",
    "worker.max_tasks": "--max-tasks",
    "log_level": "--log-level",
    "log_format": "--log-format",
}

Path_ = tuple[str, ...]
Loc = validation.Loc
_Kind = Literal["model", "dict", "list", "scalar"]


# -- where a value came from --------------------------------------------------------------------
class Origin(NamedTuple):
    """One source of values: the file, one environment variable or one flag.

    ``path`` is the configuration key the variable or flag sets; a location below it (inside a
    JSON value) is shown relative to it.
    """

    kind: Literal["file", "env", "flag"]
    name: str
    path: Path_ = ()

    def describe(self, loc: Loc, message: str, *, role_names: Mapping[int, str]) -> str:
        """``message`` about ``loc``, prefixed by where the value came from."""
        if self.kind == "file":
            return f"{self.name}: {toml_place(loc, role_names)}: {message}"
        rest = loc[len(self.path) :]
        inner = f"{json_place(rest)}: " if rest else ""
        suffix = " (environment)" if self.kind == "env" else ""
        return f"{self.name}: {inner}{message}{suffix}"

    def label(self, loc: Loc, *, role_names: Mapping[int, str]) -> str:
        """The source of ``loc`` alone, for messages about several keys."""
        if self.kind == "file":
            return f"{self.name}: {toml_place(loc, role_names)}"
        return f"{self.name} (environment)" if self.kind == "env" else self.name


def toml_place(loc: Loc, role_names: Mapping[int, str]) -> str:
    """``[worker] concurrency``, ``[[roles]] #1 (coder) timeout_s``, ``[[schedules]] #2 cron``,
    ``log_level``: an array of tables' entry is counted from 1, as a reader of the file does."""
    parts = [str(p) for p in loc]
    if loc and loc[0] == "roles" and len(loc) == 1:
        return "[[roles]]"
    if len(loc) > 1 and isinstance(loc[1], int):
        head = f"[[{loc[0]}]] #{loc[1] + 1}"
        if loc[0] == "roles" and loc[1] in role_names:
            head += f" ({role_names[loc[1]]})"
        return f"{head} {'.'.join(parts[2:])}".rstrip()
    if len(parts) <= 1:
        return parts[0] if parts else "(top level)"
    return f"[{'.'.join(parts[:-1])}] {parts[-1]}"


def json_place(loc: Loc) -> str:
    """A location inside a JSON value: ``[0].executor``, ``url``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@dataclass
class Sources:
    """Which source set each configuration key, with later (higher) layers winning."""

    role_names: dict[int, str] = field(default_factory=dict)
    _origins: dict[Path_, Origin] = field(default_factory=dict)
    #: Keys set to a whole value (not a table): a location below one (a list item, a key of a
    #: JSON value) comes from the same source. A key missing from a table is a default.
    _leaves: set[Path_] = field(default_factory=set)

    def add(self, path: Path_, value: Any, origin: Origin) -> None:
        """Record that ``origin`` set ``path`` to ``value`` (a table merges key by key)."""
        if isinstance(value, dict):
            self._leaves.discard(path)
        else:
            below = [p for p in self._origins if len(p) > len(path) and p[: len(path)] == path]
            for known in below:
                del self._origins[known]
                self._leaves.discard(known)
            self._leaves.add(path)
        self._origins[path] = origin
        if isinstance(value, dict):
            for key, inner in value.items():
                self.add((*path, str(key)), inner, origin)

    def origin(self, loc: Loc) -> Origin | None:
        """The source of the value at ``loc``: its own, or that of the whole value it is in."""
        for n in range(len(loc), 0, -1):
            prefix = loc[:n]
            if all(isinstance(p, str) for p in prefix):
                key = tuple(str(p) for p in prefix)
                found = self._origins.get(key)
                if found is not None and (n == len(loc) or key in self._leaves):
                    return found
        return None

    def describe(self, loc: Loc, message: str) -> str:
        """``message`` about ``loc`` naming its source (or just the dotted key for a default)."""
        origin = self.origin(loc)
        if origin is None:
            return f"{'.'.join(str(p) for p in loc) or '(top level)'}: {message}"
        return origin.describe(loc, message, role_names=self.role_names)

    def label(self, loc: Loc) -> str:
        """Where ``loc``'s value came from, or ``default``."""
        origin = self.origin(loc)
        return "default" if origin is None else origin.label(loc, role_names=self.role_names)


# -- the schema ----------------------------------------------------------------------------------
def _kind(annotation: Any) -> tuple[_Kind, Any]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    origin = get_origin(annotation)
    if origin is dict:
        return "dict", None
    if origin in (list, tuple):
        args = get_args(annotation)
        return "list", args[0] if args else None
    return "scalar", None


def _env_names(root: type[BaseModel]) -> Iterator[str]:
    for name, info in root.model_fields.items():
        yield name.upper()
        kind, inner = _kind(info.annotation)
        if kind == "model":
            for sub in inner.model_fields:
                yield f"{name}__{sub}".upper()


def _resolve(parts: list[str], root: type[BaseModel]) -> tuple[Path_, bool] | None:
    """The key a variable's name parts set and whether its value is JSON (None: no such key)."""
    model: type[BaseModel] | None = root
    kind: _Kind = "model"
    below_table = False  # past a free-form table (options): any key, a plain string value
    for part in parts:
        if not part:
            return None
        if kind == "dict":
            below_table = True
            continue
        if model is None:
            return None  # a scalar or a list has no keys below it
        info = model.model_fields.get(part)
        if info is None:
            return None
        kind, inner = _kind(info.annotation)
        model = inner if kind == "model" else None
    return tuple(parts), not below_table and kind != "scalar"


# -- the environment -----------------------------------------------------------------------------
@dataclass
class EnvLayers:
    """The environment's settings: short forms (lower) and nested names (higher)."""

    short: dict[str, Any] = field(default_factory=dict)
    nested: dict[str, Any] = field(default_factory=dict)
    #: (key, value, origin) in the order they apply, for :class:`Sources`.
    origins: list[tuple[Path_, Any, Origin]] = field(default_factory=list)
    #: One message per unknown variable or unreadable value; non-empty means refuse.
    problems: list[str] = field(default_factory=list)


def _set(tree: dict[str, Any], path: Path_, value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    old = node.get(path[-1])
    if isinstance(old, dict) and isinstance(value, dict):
        _merge(old, value)
    else:
        node[path[-1]] = value


def _merge(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _suggest(name: str, root: type[BaseModel]) -> str:
    """``; did you mean NAME?`` for the closest real variable, or nothing."""
    import difflib  # an error's path only (issue 31, memory)

    upper = name.upper()
    suffix = upper.removeprefix(ENV_PREFIX)
    candidates = [*_env_names(root)]
    candidates += [n.removeprefix(ENV_PREFIX) for n in (*SHORT_FORMS, *NOT_SETTINGS)]
    match = difflib.get_close_matches(suffix, candidates, n=1)
    return f"; did you mean {ENV_PREFIX}{match[0]}?" if match else ""


def parse_env(environ: Mapping[str, str], root: type[BaseModel]) -> EnvLayers:
    """Read every ``BACKLOG_WORKER_*`` variable (names are case-insensitive, ``__`` nests).

    A complex key (a table, a list) takes JSON; a key inside a free-form table (``options``)
    takes the string as it is. A name that is no setting is a problem, never silently ignored.
    Values are never put in a message (a variable may hold a token).
    """
    layers = EnvLayers()
    nested: list[tuple[Path_, str, str, bool]] = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NOT_SETTINGS:
            continue
        text = environ[name]
        if upper in SHORT_FORMS:
            path = SHORT_FORMS[upper]
            _set(layers.short, path, text)
            layers.origins.append((path, text, Origin("env", name, path)))
            continue
        resolved = _resolve(upper[len(ENV_PREFIX) :].lower().split("__"), root)
        if resolved is None:
            layers.problems.append(f"{name}: unknown setting (environment){_suggest(name, root)}")
            continue
        nested.append((resolved[0], name, text, resolved[1]))
    nested_origins: list[tuple[Path_, Any, Origin]] = []
    for path, name, raw, is_json in sorted(nested, key=lambda item: len(item[0])):
        value: Any = raw
        if is_json:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                layers.problems.append(
                    f"{name}: not valid JSON ({exc.msg} at column {exc.colno}) (environment)"
                )
                continue
        _set(layers.nested, path, value)
        nested_origins.append((path, value, Origin("env", name, path)))
    layers.origins += nested_origins  # short forms first: the nested names win
    return layers


# -- describing a validation error --------------------------------------------------------------
def describe_validation(
    exc: ValidationError,
    sources: Sources | None = None,
    root: type[BaseModel] | None = None,
) -> str:
    """A pydantic error as ``source: key: problem; ...`` (without ``sources``: ``key: problem``).

    The one formatter (:func:`tracker_client.validation.describe_validation`) with each key
    prefixed by the file, variable or flag that set it; ``root`` (the validated model) lets an
    unknown key suggest the closest known one.
    """
    if sources is None:
        return validation.describe_validation(exc, root=root)
    return validation.describe_validation(
        exc, root=root, place=lambda p: sources.describe(p.loc, p.message)
    )


def role_names(data: Mapping[str, Any]) -> dict[int, str]:
    """Index -> name of the file's ``[[roles]]`` (to say which role a bad key is in)."""
    roles = data.get("roles")
    if not isinstance(roles, list):
        return {}
    return {
        i: str(r["name"])
        for i, r in enumerate(roles)
        if isinstance(r, dict) and isinstance(r.get("name"), str)
    }


def file_origin(path: Path) -> Origin:
    """The origin of every value in the TOML file ``path``."""
    return Origin("file", str(path))
