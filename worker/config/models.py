"""Configuration: a TOML file + ``BACKLOG_WORKER_*`` environment + CLI flags (highest wins).

Every key is defined once, by the pydantic models below (:class:`TrackerConfig`,
:class:`WorkerConfig`, :class:`RoleConfig`, :class:`ConfigFile`): pydantic-settings merges the
layers and validates against them at the edge (the CLI), and the same models, frozen, are what
the daemon and the runs read (:class:`Config` adds the file it came from).
Environment variables use ``__`` for nesting: ``BACKLOG_WORKER_TRACKER__URL``,
``BACKLOG_WORKER_WORKER__CONCURRENCY``; ``BACKLOG_WORKER_API_TOKEN``,
``BACKLOG_WORKER_TRACKER_URL`` and ``BACKLOG_WORKER_AGENT_ID`` are accepted as short forms. Every
error names its real source (the file's table and key, the variable, the flag), and an unknown
``BACKLOG_WORKER_*`` variable is refused by name (see :mod:`worker.config.sources`).
``config.example.toml`` documents every key.

It may touch the configuration file (read once per load), the environment (as
:func:`~worker.config.secrets.settings_environ` gives it), the host name (the default agent id)
and the configured ``[worker] workdir``'s mode (a world-writable one without the sticky bit is
refused at load, see :func:`worker.workdirs.open_workdir_problem`);
of the rail it imports :mod:`tracker_client.errors` only.
"""

import os
import socket
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from tracker_client.errors import ConfigError
from worker.config.secrets import settings_environ
from worker.config.sources import (
    FLAG_NAMES,
    Origin,
    Sources,
    describe_validation,
    file_origin,
    parse_env,
    role_names,
)
from worker.config.telemetry import MetricsConfig, TracingConfig
from worker.config.token import pick_token, pick_url
from worker.workdirs import open_workdir_problem

__all__ = [
    "DEFAULT_TRACKER_URL",
    "Config",
    "ConfigFile",
    "RoleConfig",
    "ScheduleConfig",
    "TrackerConfig",
    "WorkerConfig",
    "check_environment",
    "load_config",
]

#: Where the embedded rail lives when nothing says otherwise (relative to the working directory).
DEFAULT_TRACKER_URL = "sqlite:///./backlog.db"


# -- the keys: one definition, validated at the edge and handed inward frozen ------------------
class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrackerConfig(_Frozen):
    """``[tracker]``: where the rail is and how to talk to it."""

    #: The rail: ``sqlite:///absolute/path.db`` or ``sqlite://relative.db`` (embedded SQLite),
    #: ``http://host:port`` (a NullTickets-API server), ``postgresql://...`` (PostgreSQL).
    #: Embedded options may ride on the URL (``?synchronous=FULL``).
    url: str = DEFAULT_TRACKER_URL
    #: A file holding the URL (one line; relative: looked up in ``$CREDENTIALS_DIRECTORY``), so
    #: a PostgreSQL password in it stays out of ``ps`` and the config (docs/operate/security.md).
    url_file: Path | None = None
    #: The admin bearer token (never in a repr); from a token file once loaded.
    api_token: str | None = Field(None, repr=False)
    #: A file holding the token (relative: looked up in ``$CREDENTIALS_DIRECTORY``).
    api_token_file: Path | None = None
    #: Seconds one tracker request may take.
    request_timeout_s: float = Field(10.0, gt=0)
    #: First back-off of a retried tracker call, in seconds (full jitter).
    retry_initial_s: float = Field(0.2, gt=0)
    #: Back-off ceiling of a retried tracker call, in seconds.
    retry_max_s: float = Field(10.0, gt=0)
    #: Upper bound for retrying a final report (transition/fail) while the tracker is down.
    report_retry_budget_s: float = Field(600.0, gt=0)
    #: Extra options for the tracker implementation (free-form).
    options: dict[str, Any] = Field(default_factory=dict)
    _api_token_source: str | None = PrivateAttr(None)

    @property
    def api_token_source(self) -> str | None:
        """Where the token came from (``from BACKLOG_WORKER_API_TOKEN``, ``read from FILE
        (--token-file)``), for a refusal to name it; never the token itself. None: no token."""
        return self._api_token_source

    def with_token(self, token: str | None, source: str | None) -> Self:
        """This table with the token the loader picked (see :mod:`worker.config.token`)."""
        picked = self.model_copy(update={"api_token": token})
        picked._api_token_source = source
        return picked


class WorkerConfig(_Frozen):
    """``[worker]``: the daemon's own settings."""

    #: The worker's name in claims and in the rail's worker list. Default (unset or empty):
    #: ``<hostname>-<$BACKLOG_WORKER_INSTANCE or pid>``.
    agent_id: str = Field(default_factory=lambda: _default_agent_id())
    #: Slots: how many tasks run at once.
    concurrency: int = Field(4, ge=1, le=10_000)
    #: A lease's time to live; the worker heartbeats every ``lease_ttl_s / 3`` (a NullTickets
    #: server resets every lease to 300 s at each heartbeat).
    lease_ttl_s: float = Field(60.0, gt=0, le=86_400)
    #: Floor of the back-off between claims that found no work, in seconds.
    idle_min_s: float = Field(0.05, gt=0)
    #: Ceiling of the back-off between claims that found no work (at least ``idle_min_s``).
    idle_max_s: float = Field(2.0, gt=0)
    #: How long in-flight tasks may finish after TERM/INT before their executors are cancelled
    #: and their tasks released.
    shutdown_grace_s: float = Field(30.0, ge=0)
    #: Seconds between maintenance passes: reclaim expired leases, expire deadlines (embedded
    #: and PostgreSQL rails).
    maintenance_interval_s: float = Field(5.0, gt=0)
    #: Exit after claiming this many tasks (0: no limit).
    max_tasks: int = Field(0, ge=0)
    #: Exit once the queue is empty (batch use).
    drain: bool = False
    #: Base of the per-run working directories. Default: ``$STATE_DIRECTORY/runs``,
    #: ``$RUNTIME_DIRECTORY/runs``, ``$XDG_RUNTIME_DIR/backlog-worker``, else
    #: ``$TMPDIR``-or-``/tmp`` ``/backlog-worker-<uid>``, made 0700.
    workdir: Path | None = None
    #: Keep each run's working directory after the run ends.
    keep_workdirs: bool = False
    #: Executor reports (events, artifacts) are batched and written at most this often.
    report_flush_s: float = Field(1.0, gt=0)
    #: Register in the rail's worker list (``backlog-worker workers``), refreshed every
    #: ``lost_after_s / 4``; the rail shows the worker ``lost`` once silent that long.
    presence: bool = True
    #: Seconds of silence after which the rail shows the worker ``lost``.
    lost_after_s: float = Field(60.0, ge=0.5, le=86_400)
    #: The worker's event loop: ``auto`` runs on uvloop where it is installed (less CPU per
    #: task), ``asyncio`` on the standard loop (about 2 MiB less peak RSS: uvloop's extension is
    #: not loaded), ``uvloop`` insists on uvloop (a configuration error where it is missing).
    #: Read at start-up (a reload keeps the running loop).
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    #: ``backlog-worker run`` tunes the cyclic garbage collector while the worker runs (freezes
    #: start-up's heap, collects the youngest generation after 20,000 net allocations instead of
    #: 700: ~7 % more no-op tasks/s); ``false`` leaves it as Python set it. Only the ``run``
    #: command's process: an application embedding a ``Worker`` is never tuned
    #: (:mod:`worker.cli.gc_tuning`). Read at start-up (a reload keeps the running value).
    gc_tuning: bool = True
    #: Directories put first on the worker's import path (``sys.path``) before the executors
    #: are built: where a python job's ``callable`` module (or a plugin's) lives, so neither a
    #: shell nor a systemd unit needs ``PYTHONPATH``. A relative entry is the config file's
    #: directory's (without a file, the working directory's); each must be a directory.
    #: Read at start-up (a reload keeps it: modules already imported stay as they are).
    python_path: tuple[Path, ...] = ()

    @field_validator("agent_id", mode="before")
    @classmethod
    def _agent_id(cls, value: Any) -> Any:
        return value if value not in (None, "") else _default_agent_id()


class RoleConfig(_Frozen):
    """One ``[[roles]]`` table: a role this worker serves, its executor, options and defaults."""

    #: The role: the ``agent_role`` of the pipeline stages this worker claims from.
    name: str = Field(min_length=1)
    #: The executor that runs the role's tasks: an entry point of the
    #: ``backlog_worker.executors`` group (``command``, ``python``, ``nullclaw``, a plugin's).
    executor: str = Field(min_length=1)
    #: The executor's options, handed to it as-is (it validates them, see
    #: :mod:`plugins.registry`).
    options: dict[str, Any] = Field(default_factory=dict)
    #: The trigger of an outcome that names none where its stage has several ways out
    #: (None: ``complete`` if the stage has it); see :mod:`worker.triggers` for the precedence.
    default_trigger: str | None = Field(None, min_length=1)
    #: Per-task timeout in seconds (a task's metadata ``timeout_s`` wins); None: none.
    timeout_s: float | None = Field(None, gt=0)
    #: This role's lease TTL (None: ``[worker] lease_ttl_s``).
    lease_ttl_s: float | None = Field(None, gt=0, le=86_400)
    #: Cap on this role's share of the worker's slots (None = all slots).
    max_concurrency: int | None = Field(None, ge=1)
    #: ``"<pipeline>.<stage>"`` or ``"<pipeline>"`` -> the trigger of an outcome naming none.
    triggers: dict[str, str] = Field(default_factory=dict)

    @field_validator("triggers", mode="before")
    @classmethod
    def _flatten_triggers(cls, value: Any) -> Any:
        # An unquoted TOML key ``review.draft = "submit"`` is the table {review = {draft = ...}}.
        if not isinstance(value, dict):
            return value
        flat: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(item, dict):
                flat.update({f"{key}.{stage}": t for stage, t in item.items()})
            else:
                flat[key] = item
        return flat

    @field_validator("triggers")
    @classmethod
    def _trigger_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key, trigger in value.items():
            parts = key.split(".")
            if not key or key != key.strip() or not all(parts):
                raise ValueError(
                    f'key {key!r} must name a pipeline ("<pipeline>") or one of its stages '
                    '("<pipeline>.<stage>")'
                )
            if not trigger or trigger != trigger.strip():
                raise ValueError(
                    f"key {key!r}: the trigger must be a non-empty name, got {trigger!r}"
                )
        return value


class ScheduleConfig(_Frozen):
    """One ``[[schedules]]`` table: a periodic schedule the worker stores (creates or updates,
    by name) in the rail at start; ``backlog-worker schedule`` shows and pauses it."""

    #: The schedule's name (``backlog-worker schedule show NAME``).
    name: str = Field(min_length=1, max_length=200)
    #: The pipeline's name or id.
    pipeline: str = Field(min_length=1)
    #: 5 fields, or 6 with seconds first (checked with ``cronsim``, as the rail checks it).
    cron: str
    #: The IANA time zone of the cron's wall clock (``Europe/Paris``), DST included.
    timezone: str = "UTC"
    #: Each task's title.
    title: str = Field(min_length=1)
    #: Each task's metadata (the rail adds ``schedule``, ``scheduled_at``, ``scheduled_at_ms``).
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: Each task's priority.
    priority: int = 0
    #: Ticks missed while no worker ran: ``skip`` them, or ``catch_up`` with one task.
    missed: Literal["skip", "catch_up"] = "skip"

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from datetime import datetime

        from cronsim import CronSim, CronSimError

        try:
            CronSim(value, datetime.now())
        except CronSimError as exc:
            raise ValueError(f"{value!r} is not a cron expression: {exc}") from None
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(value)
        except (ValueError, LookupError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


class ConfigFile(BaseModel):
    """The top level of a configuration file: its tables and the logging keys."""

    model_config = ConfigDict(extra="forbid")

    tracker: TrackerConfig = Field(default_factory=TrackerConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    roles: tuple[RoleConfig, ...] = ()
    schedules: tuple[ScheduleConfig, ...] = ()
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    #: DEBUG, INFO, WARNING, ERROR (any case; kept upper-case).
    log_level: str = "INFO"
    #: ``auto`` (rich on a terminal, journal under systemd, else plain), ``rich``, ``plain``,
    #: ``journal`` or ``json``.
    log_format: str = "auto"

    @field_validator("log_level")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()

    @field_validator("log_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        allowed = ("auto", "rich", "plain", "journal", "json")
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value


class Config(ConfigFile):
    """The whole configuration, validated and frozen (what the CLI hands the worker)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The file it was read from (None: environment and flags only).
    source: Path | None = None


class _Settings(BaseSettings, ConfigFile):
    """The layers merged and validated: the keys of :class:`ConfigFile`, no others.

    The environment is parsed by :mod:`worker.config.sources` (to refuse typos by their own
    name); this class merges the layers.
    """

    model_config = SettingsConfigDict(extra="forbid", case_sensitive=False)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Highest first: CLI flags > BACKLOG_WORKER_* environment > short env forms > TOML file.
        return (init_settings, *(_DictSource(settings_cls, layer) for layer in _LAYERS.get()))


class _DictSource(PydanticBaseSettingsSource):
    """A settings layer from an already-parsed mapping (the TOML file, the short env forms)."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


#: (nested env, short env forms, file contents) for the load in progress, highest first; a
#: ContextVar keeps loads reentrant.
_LAYERS: ContextVar[tuple[dict[str, Any], ...]] = ContextVar(
    "backlog_worker_config_layers", default=()
)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from exc


def _default_agent_id() -> str:
    instance = os.environ.get("BACKLOG_WORKER_INSTANCE")
    host = socket.gethostname() or "localhost"
    return f"{host}-{instance}" if instance else f"{host}-{os.getpid()}"


def load_config(
    path: Path | str | None = None,
    **overrides: Any,
) -> Config:
    """Read, merge and validate the configuration; raise :class:`ConfigError` naming the source.

    ``overrides`` are CLI flags as nested dicts or dotted keys (``{"worker.concurrency": 3}``);
    ``None`` values are ignored so unset flags don't mask the file; an error about one names the
    flag of :data:`~worker.config.sources.FLAG_NAMES` (else ``--key-name``).
    An unknown ``BACKLOG_WORKER_*`` environment variable is refused, naming the closest real one.
    """
    source = Path(path) if path is not None else None
    data: dict[str, Any] = _read_toml(source) if source is not None else {}
    env = parse_env(settings_environ(), _Settings)
    if env.problems:
        raise ConfigError("; ".join(env.problems))
    sources = Sources(role_names=role_names(data))
    if source is not None:
        for key, value in data.items():
            sources.add((key,), value, file_origin(source))
    for key_path, value, origin in env.origins:
        sources.add(key_path, value, origin)
    flags: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        node = flags
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        flag = FLAG_NAMES.get(key, "--" + leaf.replace("_", "-"))
        sources.add(tuple(key.split(".")), value, Origin("flag", flag, tuple(key.split("."))))
    token = _LAYERS.set((env.nested, env.short, data))
    try:
        settings = _Settings(**flags)
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc, sources, _Settings)) from None
    finally:
        _LAYERS.reset(token)
    return _freeze(settings, source, sources)


def check_environment() -> None:
    """Refuse misspelled ``BACKLOG_WORKER_*`` variables, for commands that load no configuration
    (``tracker serve``): a typo such as ``BACKLOG_WORKER_API_TOKN`` must not pass unnoticed."""
    problems = parse_env(settings_environ(), _Settings).problems
    if problems:
        raise ConfigError("; ".join(problems))


def _freeze(s: _Settings, source: Path | None, sources: Sources) -> Config:
    token, token_source = pick_token(s.tracker.api_token, s.tracker.api_token_file, sources)
    url = pick_url(s.tracker.url, s.tracker.url_file, sources)
    names = [r.name for r in s.roles]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(sources.describe(("roles",), f"role {dupes[0]!r} is configured twice"))
    if s.worker.idle_max_s < s.worker.idle_min_s:
        high, low = ("worker", "idle_max_s"), ("worker", "idle_min_s")
        raise ConfigError(
            f"worker.idle_max_s ({s.worker.idle_max_s:g}) must be >= worker.idle_min_s "
            f"({s.worker.idle_min_s:g}): idle_max_s from {sources.label(high)}, "
            f"idle_min_s from {sources.label(low)}"
        )
    if s.worker.workdir is not None:
        found = open_workdir_problem(s.worker.workdir)
        if found is not None and found[0] == "fail":
            raise ConfigError(sources.describe(("worker", "workdir"), found[1]))
    keys = {name: getattr(s, name) for name in ConfigFile.model_fields}
    keys["tracker"] = s.tracker.model_copy(update={"url": url}).with_token(token, token_source)
    if s.worker.python_path:
        # relative to the file that names them (a unit's working directory is not the user's)
        base = source.absolute().parent if source is not None else Path.cwd()
        paths = tuple(Path(os.path.normpath(base / p)) for p in s.worker.python_path)
        keys["worker"] = s.worker.model_copy(update={"python_path": paths})
    return Config(**keys, source=source)
