"""The CLI reference: every click command and group, walked from ``worker.cli:main`` (the
``backlog-worker`` entry point), with its usage, help and every option's type, default and
environment variable, read from click's own objects (``Parameter.to_info_dict``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass

import click

from .markdown import code, table, text

#: The program name, as installed by ``[project.scripts]``.
PROG = "backlog-worker"


@dataclass(frozen=True)
class Entry:
    """One command of the tree, with the context click would give it."""

    path: str
    command: click.Command
    ctx: click.Context


def commands() -> list[Entry]:
    """Every command and group under ``backlog-worker``, depth first in name order; hidden ones
    are left out, as ``--help`` leaves them out."""
    from worker.cli import main

    # The group's context settings (its ``-h, --help``), as ``backlog-worker`` runs it: a bare
    # Context would make (and click keep) a help option of ``--help`` alone.
    return list(_walk(main, click.Context(main, info_name=PROG, **main.context_settings)))


def _walk(command: click.Command, ctx: click.Context) -> Iterator[Entry]:
    yield Entry(ctx.command_path, command, ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx))


def _help(command: click.Command) -> str:
    """The help text as Markdown: paragraphs as text, click's ``\\b`` blocks (kept as typed:
    examples, lists) as code blocks; anything after ``\\f`` is not help."""
    raw = inspect.cleandoc(command.help or command.short_help or "").split("\f")[0]
    out = []
    for para in raw.split("\n\n"):
        if para.startswith("\b"):
            out.append("```text\n" + para.removeprefix("\b").strip("\n") + "\n```")
        elif para.strip():
            out.append(text(" ".join(para.split())))
    return "\n\n".join(out)


def _default(info: dict[str, object]) -> str:
    if info.get("is_flag") and info.get("default") in (None, False):
        return "off"
    value = info.get("default")
    if value is None or value == () or value == []:
        return ""
    if value == "":
        return code('""')
    if isinstance(value, list | tuple):
        return ", ".join(code(v) for v in value)
    return code(value)


def _option_rows(entry: Entry) -> list[list[str]]:
    rows = []
    for param in entry.command.get_params(entry.ctx):
        info = param.to_info_dict()
        if info.get("hidden") or param.param_type_name != "option":
            continue
        names = ", ".join(code(o) for o in [*param.opts, *param.secondary_opts])
        kind = "flag" if info.get("is_flag") else text(param.make_metavar(entry.ctx))
        if info.get("multiple"):
            kind += " (repeatable)"
        if info.get("required"):
            kind += " (required)"
        envvar = info.get("envvar")
        envs = [envvar] if isinstance(envvar, str) else list(envvar or ())
        rows.append(
            [
                names,
                kind,
                _default(info),
                ", ".join(code(e) for e in envs),
                text(" ".join(str(info.get("help") or "").split())),
            ]
        )
    return rows


def section(entry: Entry) -> str:
    """One command's section: heading, usage, help, subcommands and options."""
    usage = " ".join([entry.path, *entry.command.collect_usage_pieces(entry.ctx)])
    parts = [f"## {entry.path}", f"```text\nUsage: {usage}\n```", _help(entry.command)]
    if isinstance(entry.command, click.Group):
        subs = []
        for name in entry.command.list_commands(entry.ctx):
            sub = entry.command.get_command(entry.ctx, name)
            if sub is not None and not sub.hidden:
                subs.append([code(name), text(sub.get_short_help_str(limit=120))])
        parts.append("**Commands**\n\n" + table(["command", "what it does"], subs))
    rows = _option_rows(entry)
    if rows:
        header = ["option", "value", "default", "environment", "meaning"]
        parts.append("**Options**\n\n" + table(header, rows))
    return "\n\n".join(p for p in parts if p) + "\n"


def page() -> str:
    """The whole CLI reference page."""
    entries = commands()
    intro = (
        "# CLI\n\n"
        "Every `backlog-worker` command, generated from the click commands themselves when the "
        "docs are built, so it says what `--help` says. Every command also takes `-h`/`--help`. "
        "Exit codes are on [their own page](exit-codes.md).\n\n"
        "A value on the command line wins over the environment, which wins over the "
        "configuration file (see [Configuration](configuration.md)). An empty default means "
        "the option is unset (the configuration or the command decides).\n"
    )
    return intro + "\n" + "\n".join(section(e) for e in entries)
