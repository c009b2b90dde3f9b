"""``backlog-worker pipeline create|apply|diff|list|show``: define, change and inspect pipelines.

``apply`` and ``diff`` change a pipeline by versions (docs/operate/pipelines.md): the rail does
the work (extension ``pipeline_versions``, declared as the rail's ``pipelines`` part), so a
served rail answers them over HTTP the same way.

It may touch the tracker (create, apply, list and read pipelines), the operator's definition file
(:mod:`worker.cli.ops.input`), the embedded rail's definition rules (checked before any tracker is
opened) and the terminal.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table

from tracker_client.errors import Conflict, NotFound, Unsupported
from tracker_client.models import Pipeline
from tracker_client.ops_models import PipelinePlan
from tracker_client.protocol import RailParts, Tracker
from worker.cli.ops.common import (
    EXIT_USAGE,
    OpsContext,
    OpsError,
    common_options,
    fmt_when,
    input_errors,
    resolve_pipeline,
)
from worker.cli.ops.input import read_structured_file

__all__ = [
    "definition_changes",
    "definition_from_flags",
    "pipeline_group",
    "read_pipeline_file",
    "render_pipeline",
    "render_plan",
]


@click.group("pipeline")
def pipeline_group() -> None:
    """Create, change and inspect pipelines (stages, roles, transitions)."""


def _split(value: str, sep: str, parts: int, flag: str, shape: str) -> list[str]:
    items = [p.strip() for p in value.split(sep)]
    if len(items) != parts or not all(items):
        raise OpsError(f"{flag} {value!r} must look like {shape}", EXIT_USAGE)
    return items


def definition_from_flags(
    initial: str | None,
    states: tuple[str, ...],
    terminals: tuple[str, ...],
    transitions: tuple[str, ...],
) -> dict[str, Any]:
    """Build a pipeline definition from ``--state``/``--terminal``/``--transition`` flags."""
    if not states and not terminals:
        raise OpsError(
            "give a definition file (--file) or states (--state NAME=ROLE, --terminal NAME)",
            EXIT_USAGE,
        )
    defined: dict[str, dict[str, Any]] = {}
    for value in states:
        name, role = _split(value, "=", 2, "--state", "NAME=ROLE (e.g. draft=writer)")
        if name in defined:
            raise OpsError(f"--state {name!r} is given twice", EXIT_USAGE)
        defined[name] = {"agent_role": role}
    for name in terminals:
        if name in defined:
            raise OpsError(f"--terminal {name!r} is also given as a state", EXIT_USAGE)
        defined[name] = {"terminal": True}
    edges = []
    for value in transitions:
        src, trigger, dst = _split(
            value, ":", 3, "--transition", "FROM:TRIGGER:TO (e.g. draft:submit:review)"
        )
        edges.append({"from": src, "trigger": trigger, "to": dst})
    return {"initial": initial or next(iter(defined)), "states": defined, "transitions": edges}


#: The keys of a pipeline file that holds its name: ``{name, definition, moves}``.
FILE_KEYS = ("name", "definition", "moves")


def _file_keys(path: Path, data: Mapping[str, Any]) -> None:
    """Refuse a misspelt key of the ``{name, definition}`` form: a ``[definiton]`` table would
    otherwise make the whole file read as a definition (and fail as one, or say 'no name')."""
    named = "name" in data or "definition" in data or "moves" in data
    for key in data:
        if key in FILE_KEYS:
            continue
        close = difflib.get_close_matches(str(key), FILE_KEYS, n=1, cutoff=0.7)
        if named or close:
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise OpsError(
                f"pipeline file {str(path)!r}: unknown key {key!r}{hint}; a pipeline file holds "
                "'name', 'definition' and 'moves', or the definition alone",
                EXIT_USAGE,
            )
    if named and "definition" not in data:
        raise OpsError(
            f"pipeline file {str(path)!r} has a 'name' but no 'definition' table", EXIT_USAGE
        )


def _from_file(path: Path, name: str | None) -> tuple[str, Any]:
    """(name, definition) from a file holding a definition, or ``{name, definition}``."""
    data = read_structured_file(path, "pipeline file")
    if isinstance(data, dict):
        _file_keys(path, data)
    if isinstance(data, dict) and "definition" in data:
        file_name = data.get("name")
        if file_name is not None and not isinstance(file_name, str):
            raise OpsError(f"pipeline file {str(path)!r}: 'name' must be a string", EXIT_USAGE)
        chosen = name or file_name
        definition = data["definition"]
    else:
        chosen, definition = name, data
    if not chosen:
        raise OpsError(
            f"pipeline file {str(path)!r} has no 'name': pass NAME on the command line",
            EXIT_USAGE,
        )
    return chosen, definition


def _canonical(value: Any) -> str:
    """One text per JSON value, whatever its key order (a rail may store it re-ordered)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _edge(t: Any) -> str:
    if isinstance(t, Mapping):
        return f"{t.get('from')}:{t.get('trigger')}:{t.get('to')}"
    return _canonical(t)


def definition_changes(stored: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    """What ``given`` changes in ``stored``, one short phrase each (empty: the same pipeline).

    Key order does not count (JSON objects); the order of ``transitions`` does not either (the
    rail keys them by ``from`` and ``trigger``), but anything else of a transition does.
    """
    changes: list[str] = []
    for key in sorted(set(stored) | set(given)):
        old, new = stored.get(key), given.get(key)
        if key == "transitions" and isinstance(old, list) and isinstance(new, list):
            before = {_canonical(t): _edge(t) for t in old}
            after = {_canonical(t): _edge(t) for t in new}
            added = [e for k, e in after.items() if k not in before]
            removed = [e for k, e in before.items() if k not in after]
            if added:
                changes.append(f"transitions added: {', '.join(added)}")
            if removed:
                changes.append(f"transitions removed: {', '.join(removed)}")
        elif key == "states" and isinstance(old, Mapping) and isinstance(new, Mapping):
            for verb, names in (
                ("added", [n for n in new if n not in old]),
                ("removed", [n for n in old if n not in new]),
                (
                    "changed",
                    [n for n in new if n in old and _canonical(old[n]) != _canonical(new[n])],
                ),
            ):
                if names:
                    changes.append(f"states {verb}: {', '.join(map(str, names))}")
        elif _canonical(old) != _canonical(new):
            if key not in stored:
                changes.append(f"{key!r} added")
            elif key not in given:
                changes.append(f"{key!r} removed")
            else:
                changes.append(f"{key!r} changed")
    return changes


#: How a pipeline is changed (as a new version, its tasks moved: docs/operate/pipelines.md).
HOW_TO_CHANGE = (
    "`pipeline create` makes a pipeline once; to change it, put the new definition in a file "
    "with name = {name!r} and run `backlog-worker pipeline diff -f FILE`, then "
    "`backlog-worker pipeline apply -f FILE` (a new version; its waiting tasks follow it)"
)


@pipeline_group.command("create")
@click.argument("name", required=False)
@click.option(
    "--file",
    "-f",
    "file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Definition as JSON or TOML (.toml); may hold {name, definition} or the definition.",
)
@click.option("--initial", help="Initial stage (default: the first --state).")
@click.option("--state", "states", multiple=True, metavar="NAME=ROLE", help="A working stage.")
@click.option("--terminal", "terminals", multiple=True, metavar="NAME", help="A terminal stage.")
@click.option(
    "--transition", "transitions", multiple=True, metavar="FROM:TRIGGER:TO", help="An edge."
)
@click.option("--idempotency-key", help="Make a retried create safe.")
@common_options
def pipeline_create(
    name: str | None,
    file: Path | None,
    initial: str | None,
    states: tuple[str, ...],
    terminals: tuple[str, ...],
    transitions: tuple[str, ...],
    idempotency_key: str | None,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Create a pipeline from a file or from flags.

    Creating a pipeline that exists with the same definition changes nothing and exits 0
    ("unchanged"), so the command can sit in a deploy script; a different definition under
    an existing name is refused (exit 1), naming what differs.

    \b
    backlog-worker pipeline create -f review.toml
    backlog-worker pipeline create review --state draft=writer --state review=reviewer \\
        --terminal done --transition draft:submit:review --transition review:approve:done \\
        --transition review:reject:draft
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        if file is not None:
            if states or terminals or transitions or initial:
                raise OpsError("give either --file or --state/--terminal/--transition", EXIT_USAGE)
            name, definition = _from_file(file, name)
        else:
            if not name:
                raise OpsError("missing pipeline NAME", EXIT_USAGE)
            definition = definition_from_flags(initial, states, terminals, transitions)
        if not isinstance(definition, dict):
            raise OpsError("pipeline definition must be an object", EXIT_USAGE)
        # The project's rules, checked before any tracker is opened (a NullTickets server
        # would only say "validation_failed"); ValidationFailed names the broken rule.
        from tracker_client.rules.pipelines import validate_definition

        validate_definition(definition)
    pipeline_name = name

    async def existing(tracker: Tracker) -> Pipeline | None:
        try:
            pipelines = await tracker.list_pipelines()
        except (NotFound, Unsupported):
            return None  # a server that lists none: the create says whether the name is taken
        for found in pipelines:
            if found.name == pipeline_name:
                return found
        return None

    def answer(pipeline_id: str, unchanged: bool) -> int:
        if ops.as_json:
            ops.emit_json({"id": pipeline_id, "name": pipeline_name, "unchanged": unchanged})
        elif unchanged:
            ops.print(f"pipeline {pipeline_name} {pipeline_id} unchanged (same definition)")
        else:
            ops.print(f"created pipeline {pipeline_name} {pipeline_id}")
        return 0

    def same_or_refuse(found: Pipeline) -> int:
        changes = definition_changes(found.definition, json.loads(json.dumps(definition)))
        if not changes:
            return answer(found.id, unchanged=True)
        raise OpsError(
            f"pipeline {pipeline_name!r} ({found.id}) already exists with a different "
            f"definition ({'; '.join(changes)}): " + HOW_TO_CHANGE.format(name=pipeline_name)
        )

    async def create(tracker: Tracker) -> int:
        # Looked up first: a deploy script re-running the create must not fail, and a server
        # that let two pipelines share a name would otherwise get a second one.
        found = await existing(tracker)
        if found is not None:
            return same_or_refuse(found)
        try:
            pipeline_id = await tracker.create_pipeline(
                pipeline_name, definition, idempotency_key=idempotency_key
            )
        except Conflict:
            found = await existing(tracker)  # created meanwhile (another deploy)
            if found is None:
                raise
            return same_or_refuse(found)
        return answer(pipeline_id, unchanged=False)

    ops.run(create, create=True)


@dataclass(frozen=True)
class PipelineFile:
    """A pipeline file as ``apply``/``diff`` read it: the name, the definition, the moves."""

    name: str
    definition: dict[str, Any]
    moves: dict[str, str]


def _moves_of(path: Path, data: Any) -> dict[str, str]:
    moves = data.get("moves") if isinstance(data, dict) else None
    if moves is None:
        return {}
    if not isinstance(moves, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in moves.items()
    ):
        raise OpsError(
            f"pipeline file {str(path)!r}: 'moves' must map old stage names to new ones, "
            f'e.g. moves = {{ review = "check" }}; got {moves!r}',
            EXIT_USAGE,
        )
    return dict(moves)


def _misplaced_moves(definition: Mapping[str, Any]) -> str | None:
    """Where a ``moves`` key sits inside the definition (in TOML, a line below ``[definition]``
    or below its last ``[[definition.transitions]]`` belongs to that table), or None."""
    if "moves" in definition:
        return "the definition"
    states = definition.get("states")
    for name, state in states.items() if isinstance(states, Mapping) else ():
        if isinstance(state, Mapping) and "moves" in state:
            return f"the definition's state {name!r}"
    transitions = definition.get("transitions")
    for i, t in enumerate(transitions if isinstance(transitions, list) else [], start=1):
        if isinstance(t, Mapping) and "moves" in t:
            return f"the definition's transition #{i}"
    return None


def read_pipeline_file(path: Path, name: str | None) -> PipelineFile:
    """The pipeline file ``path`` for ``apply``/``diff``; ``OpsError`` naming what is wrong
    (no name, a NAME that is not the file's, ``moves`` misplaced or malformed, a definition
    that breaks a rule)."""
    data = read_structured_file(path, "pipeline file")
    if isinstance(data, dict):
        _file_keys(path, data)
    file_name = data.get("name") if isinstance(data, dict) else None
    if name is not None and file_name is not None and name != file_name:
        raise OpsError(
            f"pipeline file {str(path)!r} is for pipeline {file_name!r}, not {name!r}: "
            "apply it without NAME, or give the file of that pipeline",
            EXIT_USAGE,
        )
    chosen, definition = _from_file(path, name)
    if not isinstance(definition, dict):
        raise OpsError(
            f"pipeline file {str(path)!r}: the definition must be a table (object)", EXIT_USAGE
        )
    where = _misplaced_moves(definition)
    if where is not None:
        raise OpsError(
            f"pipeline file {str(path)!r}: 'moves' is inside {where}; in TOML put the moves "
            'line above the [definition] table (moves = { old = "new" })',
            EXIT_USAGE,
        )
    moves = _moves_of(path, data)
    from tracker_client.rules.pipelines import validate_definition

    validate_definition(definition)  # the rail's rules, named before any tracker is opened
    return PipelineFile(chosen, definition, moves)


def render_plan(plan: PipelinePlan, *, applied: bool) -> list[str]:
    """A plan as lines: what changes, the moves, the tasks concerned."""
    if plan.created:
        verb = "created" if applied else "would be created"
        stages = ", ".join(plan.stages_added)
        return [f"pipeline {plan.name} {verb} (version 1): stages {stages}"]
    if plan.unchanged:
        return [f"pipeline {plan.name} unchanged (version {plan.version})"]
    verb = "applied" if applied else "would change"
    lines = [f"pipeline {plan.name} {verb}: version {plan.from_version} -> {plan.version}"]
    lines += [f"  + stage {s}" for s in plan.stages_added]
    lines += [f"  - stage {s}" for s in plan.stages_removed]
    lines += [f"  ~ stage {s}" for s in plan.stages_changed]
    lines += [f"  + transition {t}" for t in plan.transitions_added]
    lines += [f"  - transition {t}" for t in plan.transitions_removed]
    lines += [f"  ~ {s}" for s in plan.settings_changed]
    for old, new in plan.moves.items():
        n = plan.tasks_moving.get(old, 0)
        lines.append(f"  move {old} -> {new}: {n} task(s) {'moved' if applied else 'would move'}")
    lines.append(
        f"  tasks: {plan.tasks_updated} {'brought' if applied else 'to bring'} to version "
        f"{plan.version}, {plan.tasks_running} running (finish under version "
        f"{plan.from_version}, then land in {plan.version})"
    )
    return lines


def _run_file(
    verb: str,
    name: str | None,
    file: Path,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """The shared body of ``apply`` and ``diff``."""
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        given = read_pipeline_file(file, name)

    async def run(tracker: Tracker) -> int:
        parts = RailParts.declared(tracker, await tracker.capabilities())
        rail = parts.pipelines
        if rail is None:
            raise OpsError(
                f"this rail does not support changing pipelines (`pipeline {verb}` needs "
                "extension pipeline_versions: an embedded, PostgreSQL or served "
                "backlog-worker rail; a plain NullTickets server has none)"
            )
        call = rail.apply_pipeline if verb == "apply" else rail.diff_pipeline
        plan = await call(given.name, given.definition, given.moves or None)
        if ops.as_json:
            ops.emit_json(plan)
        else:
            for line in render_plan(plan, applied=verb == "apply"):
                ops.print(line)
        return 0

    ops.run(run, create=verb == "apply")


_FILE_OPTION = click.option(
    "--file",
    "-f",
    "file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The pipeline file (TOML or JSON): name, moves and [definition].",
)


@pipeline_group.command("apply")
@click.argument("name", required=False)
@_FILE_OPTION
@common_options
def pipeline_apply(
    name: str | None,
    file: Path,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Create a pipeline or change it to the file's definition (a new version).

    Idempotent: the same file again changes nothing and prints "unchanged". Waiting tasks
    follow the new version; a running task finishes under the version it was claimed with.
    A stage the file removes or renames must not hold tasks unless the file maps it to a
    stage of the new definition, in one transaction with the change:

    \b
    name = "review"
    moves = { review = "check" }    # old stage = new stage
    [definition]
    ...

    See what it would do first with `pipeline diff -f FILE` (docs/operate/pipelines.md).
    """
    _run_file("apply", name, file, tracker_url, config_path, as_json)


@pipeline_group.command("diff")
@click.argument("name", required=False)
@_FILE_OPTION
@common_options
def pipeline_diff(
    name: str | None,
    file: Path,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Show what `pipeline apply -f FILE` would change, changing nothing.

    Stages and transitions added, removed or changed, settings (retry, ...), the moves and
    how many tasks each would move, and the tasks that would follow the new version. Refused
    as the apply would be (exit 1), naming each stage that would strand tasks.
    """
    _run_file("diff", name, file, tracker_url, config_path, as_json)


@pipeline_group.command("list")
@common_options
def pipeline_list(tracker_url: str | None, config_path: Path | None, as_json: bool) -> None:
    """List pipelines, newest first."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def show(tracker: Tracker) -> int:
        pipelines = await tracker.list_pipelines()
        if ops.as_json:
            ops.emit_json(pipelines)
            return 0
        if not pipelines:
            ops.print("no pipelines yet: create one with `backlog-worker pipeline create`")
            return 0
        wide = ops.console.width >= 120
        table = Table(title="pipelines", box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
        table.add_column("name", overflow="fold")
        table.add_column("id", no_wrap=True)
        table.add_column("stages (* initial)", overflow="fold", ratio=1)
        table.add_column("roles", overflow="fold")
        if wide:
            table.add_column("created", no_wrap=True)
        for p in pipelines:
            states = p.definition.get("states") or {}
            initial = p.definition.get("initial")
            roles = sorted(
                {
                    str(s["agent_role"])
                    for s in states.values()
                    if isinstance(s, dict) and s.get("agent_role")
                }
            )
            stages = " ".join(f"{name}*" if name == initial else str(name) for name in states)
            cells = [p.name, p.id, stages, " ".join(roles)]
            if wide:
                cells.append(fmt_when(p.created_at_ms))
            table.add_row(*cells)
        ops.print(table)
        return 0

    ops.run(show)


def render_pipeline(pipeline: Pipeline) -> list[Table]:
    """A pipeline as two tables: its stages and its transitions."""
    definition = pipeline.definition
    initial = definition.get("initial")
    stages = Table(title=f"pipeline {pipeline.name} ({pipeline.id})")
    for col in ("stage", "role", "kind", "description"):
        stages.add_column(col, overflow="fold")
    for name, state in (definition.get("states") or {}).items():
        state = state if isinstance(state, dict) else {}
        kind = "terminal" if state.get("terminal") else "working"
        if name == initial:
            kind = f"initial, {kind}"
        stages.add_row(
            name, str(state.get("agent_role") or "-"), kind, str(state.get("description", ""))
        )
    retry = definition.get("retry")
    if retry is not None:
        # What the pipeline sets; the rail's default (5 attempts, 1 s exponential) fills the rest.
        shown = retry if isinstance(retry, str) else ", ".join(f"{k}={v}" for k, v in retry.items())
        stages.caption = f"retry policy of its tasks: {shown} (the rail's default for the rest)"
    edges = Table(title="transitions")
    for col in ("from", "trigger", "to", "instructions"):
        edges.add_column(col, overflow="fold")
    for t in definition.get("transitions") or []:
        if isinstance(t, dict):
            edges.add_row(
                str(t.get("from")),
                str(t.get("trigger")),
                str(t.get("to")),
                str(t.get("instructions", "")),
            )
    return [stages, edges]


@pipeline_group.command("show")
@click.argument("pipeline")
@common_options
def pipeline_show(
    pipeline: str, tracker_url: str | None, config_path: Path | None, as_json: bool
) -> None:
    """Show one pipeline (by id or name): stages, roles and transitions."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def show(tracker: Tracker) -> int:
        found = await resolve_pipeline(tracker, pipeline)
        if ops.as_json:
            ops.emit_json(found)
        else:
            ops.print(*render_pipeline(found))
        return 0

    ops.run(show)
