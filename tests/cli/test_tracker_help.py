"""Every ``--tracker`` option's help names every form of a tracker URL, in the same words."""

from __future__ import annotations

import click
import pytest

from tests.cli.conftest import invoke
from tracker_client.factory import URL_FORMS
from worker.cli import main

FORMS = ("sqlite:///", "http(s)://", "postgresql://")


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command under ``group`` that has a ``--tracker`` option."""
    found: list[tuple[str, ...]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # a lazy group loads each command when asked
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        elif any("--tracker" in p.opts for p in command.params):
            found.append((*path, name))
    return found


TRACKER_COMMANDS = _commands(main)


def test_the_forms_are_every_scheme_the_factory_opens() -> None:
    for form in FORMS:
        assert form in URL_FORMS


def test_many_commands_take_a_tracker() -> None:
    assert {("run",), ("check",), ("task", "add"), ("dashboard",), ("tracker", "serve")} <= set(
        TRACKER_COMMANDS
    )


@pytest.mark.parametrize("path", TRACKER_COMMANDS, ids=" ".join)
def test_tracker_help_names_every_url_form(path: tuple[str, ...]) -> None:
    result = invoke([*path, "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # click wraps the help
    for form in FORMS:
        assert form in text, f"{' '.join(path)} --help does not name {form}"


def test_an_unknown_scheme_names_every_form() -> None:
    result = invoke(["task", "list", "--tracker", "ftp://host/rail"])
    assert result.exit_code == 2
    assert "unknown scheme 'ftp'" in result.stderr
    assert " ".join(URL_FORMS.split()) in " ".join(result.stderr.split())
