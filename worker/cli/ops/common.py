"""Shared plumbing of the operator subcommands: options, tracker resolution, errors, output.

Every operator command takes ``--tracker URL``, ``--config FILE`` and ``--json``, opens the
tracker for the duration of one ``anyio.run``, and turns every expected failure into one line on
stderr plus an exit code (see :data:`EXIT_CODES`); no traceback ever reaches the operator.

It may touch the tracker factory (one tracker per command, closed at its end), the configuration
(:func:`~worker.config.models.load_config`), the terminal (rich consoles) and stderr; of the tracker
it asks only for pipelines, to resolve one by name. What a command asks the tracker is that
command's own.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import click
from pydantic import BaseModel
from rich.console import Console
from rich.text import Text

from tracker_client.errors import (
    BacklogWorkerError,
    NotFound,
)
from tracker_client.factory import URL_FORMS, open_tracker, require_rail
from tracker_client.models import Pipeline
from tracker_client.nulltickets.options import OPERATOR_RETRY
from tracker_client.protocol import Tracker
from worker.cli.errors import (
    EXIT_BACKLOG_FULL,
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    NO_TOKEN,
    OpsError,
    describe,
    escape_controls,
    exit_code_for,
    fail,
    input_errors,
)
from worker.cli.token import token_options, token_overrides
from worker.config.models import DEFAULT_TRACKER_URL, load_config

__all__ = [
    "DEFAULT_TRACKER_URL",
    "EXIT_BACKLOG_FULL",
    "EXIT_CODES",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "PIPED_WIDTH",
    "DurationType",
    "OpsContext",
    "OpsError",
    "SafeConsole",
    "TrackerTarget",
    "common_options",
    "describe",
    "escape_controls",
    "exit_code_for",
    "fail",
    "fmt_age",
    "fmt_ms",
    "fmt_when",
    "input_errors",
    "now_ms",
    "resolve_pipeline",
    "resolve_tracker",
    "to_jsonable",
    "unwrap_groups",
]


F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


# -- options ----------------------------------------------------------------------------------
def common_options(func: F) -> F:
    """Add ``--tracker``, ``--config``, ``--json``, ``--token`` and ``--token-file`` to an
    operator command."""
    func = token_options(func)
    func = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Machine-readable JSON on stdout instead of tables.",
    )(func)
    func = click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        envvar="BACKLOG_WORKER_CONFIG",
        help="Config file (TOML) whose [tracker] section names the rail.",
    )(func)
    func = click.option(
        "--tracker",
        "tracker_url",
        default=None,
        metavar="URL",
        help=f"Tracker URL: {URL_FORMS}. Default: "
        f"$BACKLOG_WORKER_TRACKER_URL, the config's [tracker] url, else {DEFAULT_TRACKER_URL}.",
    )(func)
    return func


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


if TYPE_CHECKING:
    _ParamBase = click.ParamType[float]
else:  # click < 8.2 has no generic ParamType
    _ParamBase = click.ParamType


class DurationType(_ParamBase):
    """A duration: ``90``, ``90s``, ``1.5m``, ``2h``, ``500ms``, ``1d`` -> seconds (float)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Parse ``value`` into seconds."""
        if isinstance(value, int | float):
            return float(value)
        match = _DURATION.match(str(value))
        if match is None:
            self.fail(f"{value!r} is not a duration (e.g. 30, 30s, 5m, 2h, 500ms)", param, ctx)
        return float(match.group(1)) * _UNITS[match.group(2)]


# -- tracker resolution -------------------------------------------------------------------------
@dataclass(frozen=True)
class TrackerTarget:
    """The tracker a command talks to: URL, admin token (never printed), where the token came
    from (``from BACKLOG_WORKER_API_TOKEN``; None: no token) and open options."""

    url: str
    api_token: str | None = field(default=None, repr=False)
    options: Mapping[str, Any] = field(default_factory=dict)
    token_source: str | None = None


def resolve_tracker(tracker_url: str | None, config_path: Path | None) -> TrackerTarget:
    """The tracker to use: ``--tracker``, else ``BACKLOG_WORKER_TRACKER_URL`` / the config
    file's ``[tracker] url`` (see :func:`worker.config.models.load_config`), else the default; the
    token from ``--token``/``--token-file`` of the running command, else the environment or
    the config file.
    """
    cfg = load_config(config_path, **{"tracker.url": tracker_url, **token_overrides()})
    t = cfg.tracker
    return TrackerTarget(t.url, t.api_token, dict(t.options), t.api_token_source)


def _require_existing_rail(url: str) -> None:
    """``NoRail`` (exit 2) when ``url`` names an embedded rail file that is missing or empty."""
    require_rail(url)


def unwrap_groups(run: Callable[..., T], *args: Any) -> T:
    """``run(*args)``, re-raising the first meaningful leaf of an exception group (task groups
    wrap what their children raise) so the handlers below see the error itself."""
    try:
        return run(*args)
    except BaseExceptionGroup as group:
        leaves: list[BaseException] = []

        def walk(exc: BaseException) -> None:
            if isinstance(exc, BaseExceptionGroup):
                for inner in exc.exceptions:
                    walk(inner)
            else:
                leaves.append(exc)

        walk(group)
        for kind in (KeyboardInterrupt, BacklogWorkerError):
            for leaf in leaves:
                if isinstance(leaf, kind):
                    raise leaf from group
        raise


#: The console width when stdout is not a terminal: wide enough that no cell is ever folded.
PIPED_WIDTH = 100_000


class SafeConsole(Console):
    """A console that prints user text as text: no markup, no emoji codes, and control
    characters (a task title may hold ESC sequences) shown escaped instead of reaching the
    operator's terminal."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("highlight", False)
        super().__init__(markup=False, emoji=False, **kwargs)
        if "width" not in kwargs and not self.is_terminal:
            # Piped or redirected: a cell is never folded mid-word at 80 columns (or $COLUMNS);
            # tables take the width their cells need, as one line per row for grep and cut.
            self.width = PIPED_WIDTH

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Escape control characters, then render as plain text."""
        return super().render_str(escape_controls(text), **kwargs)


# -- running ------------------------------------------------------------------------------------
@dataclass
class OpsContext:
    """What one operator command runs with: the tracker to open and how to print."""

    tracker_url: str | None
    config_path: Path | None
    as_json: bool
    console: Console

    @classmethod
    def build(cls, tracker_url: str | None, config_path: Path | None, as_json: bool) -> OpsContext:
        """The context of a command invocation (no I/O yet)."""
        return cls(tracker_url, config_path, as_json, SafeConsole(soft_wrap=False))

    def run(
        self,
        fn: Callable[[Tracker], Awaitable[int | None]],
        *,
        interrupted: Callable[[], str] | None = None,
        interrupt_exit: int = 130,
        create: bool = False,
    ) -> None:
        """Open the tracker, run ``fn`` in ``anyio.run``, close it, exit with the right code.

        Raises ``click.exceptions.Exit`` on failure; returns normally on exit code 0.
        ``interrupted`` gives the line printed on Ctrl-C, which exits ``interrupt_exit``.
        Only ``create=True`` (creating a pipeline) may start a new embedded rail file; any other
        command pointed at a missing file says so instead of creating an empty rail.
        """
        url: str | None = None
        token_source: str | None = None  # unknown until the configuration is read
        try:
            target = resolve_tracker(self.tracker_url, self.config_path)
            url = target.url
            token_source = target.token_source or NO_TOKEN
            if not create:
                _require_existing_rail(url)

            async def main() -> int:
                # An operator command rides out a short outage itself (the worker instead
                # retries in its lease session): the remote client retries only when asked.
                tracker = await open_tracker(
                    target.url, api_token=target.api_token, retry=OPERATOR_RETRY, **target.options
                )
                try:
                    return (await fn(tracker)) or EXIT_OK
                finally:
                    with anyio.CancelScope(shield=True):
                        await tracker.aclose()

            code = unwrap_groups(anyio.run, main)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except BacklogWorkerError as exc:
            raise fail(exc, url, token_source) from None
        except KeyboardInterrupt:
            click.echo(interrupted() if interrupted else "interrupted", err=True)
            raise click.exceptions.Exit(interrupt_exit) from None
        except OSError as exc:
            raise fail(OpsError(f"{exc.strerror or exc}", EXIT_FAILURE), url) from None
        except Exception as exc:
            # A bug (ours or a tracker's answer we could not read): still one line, no traceback,
            # unless BACKLOG_WORKER_DEBUG asks for it.
            if os.environ.get("BACKLOG_WORKER_DEBUG"):
                raise
            message = f"unexpected {type(exc).__name__}: {exc} (BACKLOG_WORKER_DEBUG=1 shows where)"
            raise fail(OpsError(message, EXIT_FAILURE), url) from None
        if code:
            raise click.exceptions.Exit(code)

    # -- output ---------------------------------------------------------------------------------
    def emit_json(self, data: Any, *, compact: bool = False) -> None:
        """Write ``data`` (models, lists, dicts) as JSON on stdout."""
        text = json.dumps(to_jsonable(data), indent=None if compact else 2, sort_keys=False)
        click.echo(text)

    def print(self, *objects: Any) -> None:
        """Print rich renderables on stdout (plain message lines are never wrapped)."""
        soft = all(isinstance(o, str) for o in objects)
        self.console.print(*objects, soft_wrap=soft)

    def emit_list(self, items: list[T], table: Callable[[list[T]], Any], empty: str) -> None:
        """A listing: JSON with ``--json``, else ``empty`` when there is nothing, else its table."""
        if self.as_json:
            self.emit_json(items)
        elif not items:
            self.print(empty)
        else:
            self.print(table(items))


def to_jsonable(data: Any) -> Any:
    """Pydantic models and containers of them -> plain JSON values."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, Mapping):
        return {str(k): to_jsonable(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [to_jsonable(v) for v in data]
    return data


# -- lookups ------------------------------------------------------------------------------------
async def resolve_pipeline(tracker: Tracker, ref: str) -> Pipeline:
    """A pipeline by id, else by name; ``OpsError`` naming the known ones when neither matches."""
    try:
        return await tracker.get_pipeline(ref)
    except NotFound:
        pass
    pipelines = await tracker.list_pipelines()
    for pipeline in pipelines:
        if pipeline.name == ref:
            return pipeline
    known = ", ".join(sorted(p.name for p in pipelines)) or "none yet"
    raise OpsError(f"unknown pipeline {ref!r} (known: {known})")


# -- formatting ---------------------------------------------------------------------------------
def now_ms() -> int:
    """Wall clock in epoch milliseconds."""
    return int(datetime.now().timestamp() * 1000)


def fmt_ms(epoch_ms: int | None) -> str:
    """Local time of an epoch-ms stamp, ``-`` for None."""
    if epoch_ms is None:
        return "-"
    if epoch_ms >= 2**53:
        return "never"
    return datetime.fromtimestamp(epoch_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def fmt_when(epoch_ms: int | None) -> str:
    """Like :func:`fmt_ms` but only the time of day for stamps of today (compact tables)."""
    text = fmt_ms(epoch_ms)
    today = datetime.now().strftime("%Y-%m-%d ")
    return text[len(today) :] if text.startswith(today) else text


def fmt_age(ms: int | None) -> str:
    """A duration in ms as ``1h02m``, ``3m12s``, ``4.2s``; ``-`` for None."""
    if ms is None:
        return "-"
    seconds = max(0, ms) / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def stdin_is_tty() -> bool:
    """Whether an operator is at the keyboard (confirmation prompts make sense)."""
    return sys.stdin.isatty()
