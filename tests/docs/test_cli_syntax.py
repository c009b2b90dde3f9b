"""Commands on the docs' pages that a test cannot start for real (a server that runs until
stopped, a production host's paths, a person's step in a pipeline) are parsed by the real
command line: every subcommand, flag and value of each ``backlog-worker`` line must be one the
CLI accepts, so a renamed flag fails here. Nothing is run; a file the command names need not
exist here (it is on the production host), and lines of other programs are not checked."""

from __future__ import annotations

import shlex

import click
import pytest

from tests.docs.blocks import Block, blocks, doc_pages, shell_commands
from worker.cli import main

ME = "tests/docs/test_cli_syntax.py"


def _marked() -> list[Block]:
    return [
        b
        for page in doc_pages()
        for b in blocks(page)
        if b.marker == "tested-by" and ME in b.marker_value
    ]


def parse(argv: list[str]) -> click.Command:
    """Resolve and parse ``argv`` as ``backlog-worker`` would, without invoking anything."""
    ctx = main.make_context("backlog-worker", list(argv))
    command: click.Command = main
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        assert sub is not None and name is not None, argv
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub
    return command


def commands_of(block: Block) -> list[list[str]]:
    """The block's ``backlog-worker`` lines (``sudo -u USER`` in front of one included), each
    cut at a redirection or a pipe."""
    found = []
    for line in shell_commands(block.body):
        words = shlex.split(line, comments=True)
        if words[:2] == ["sudo", "-u"]:
            words = words[3:]
        if not words or words[0] != "backlog-worker":
            continue
        for i, word in enumerate(words):
            if word in {">", ">>", "|", "&&", ";"}:
                words = words[:i]
                break
        found.append(words[1:])
    assert found, f"{block.where}: no backlog-worker command"
    return found


def test_some_blocks_are_marked() -> None:
    assert len(_marked()) >= 4


def test_a_command_run_as_another_user_is_parsed() -> None:
    block = Block(
        "probe.md", 1, "sh", "", "sudo -u svc backlog-worker check --config c.toml\n", "", ""
    )
    assert commands_of(block) == [["check", "--config", "c.toml"]]


@pytest.mark.parametrize("block", _marked(), ids=lambda b: b.where)
def test_every_command_parses(block: Block) -> None:
    for argv in commands_of(block):
        where = f"{block.where}: backlog-worker {shlex.join(argv)}"
        try:
            parse(argv)
        except click.BadParameter as exc:
            if "does not exist" not in exc.format_message():  # a path on a production host
                pytest.fail(f"{where}: {exc.format_message()}")
        except click.UsageError as exc:
            pytest.fail(f"{where}: {exc.format_message()}")
