"""``backlog-worker token create|list|revoke``: the served rail's scoped tokens.

The operator's face of :class:`tracker_client.serve.tokens.TokenStore`: run on the server's host,
it writes the tokens file ``tracker serve`` reads (``--tokens``, ``$BACKLOG_WORKER_TOKENS_FILE``,
or ``RAIL.tokens.json`` beside an embedded rail's file); a running server takes a change within
a second, with no restart. A new token's value is printed once, on stdout, and kept nowhere
(the file holds its SHA-256). It touches the tokens file and the terminal only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracker_client.factory import URL_FORMS
from worker.cli.errors import input_errors

if TYPE_CHECKING:
    from tracker_client.serve.tokens import TokenStore

__all__ = ["register", "token_group"]

_TOKENS_OPTION = click.option(
    "--tokens",
    "tokens_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The tokens file `tracker serve` reads. Default: $BACKLOG_WORKER_TOKENS_FILE, else"
    " RAIL.tokens.json beside the embedded rail's file (--tracker or the config's).",
)
_TRACKER_OPTION = click.option(
    "--tracker",
    "tracker_url",
    default=None,
    metavar="URL",
    help="The served rail's own URL, as every --tracker names one ("
    + URL_FORMS
    + "), to find its tokens file beside an embedded rail's. Default:"
    " $BACKLOG_WORKER_TRACKER_URL or the config's [tracker].",
)


def _store(tokens_file: Path | None, tracker_url: str | None) -> TokenStore:
    from tracker_client.errors import ConfigError
    from tracker_client.serve.tokens import TokenStore, tokens_path
    from worker.cli.ops.common import resolve_tracker

    url = None if tokens_file is not None else resolve_tracker(tracker_url, None).url
    if url is not None and url.startswith(("http://", "https://")):
        raise ConfigError(
            "token: the tokens file lives beside the server: run this on the host of"
            " `tracker serve`, with --tokens FILE or its rail's sqlite:/// URL"
        )
    return TokenStore(tokens_path(tokens_file, url))


@click.group("token", short_help="Create, list or revoke the served rail's scoped tokens.")
def token_group() -> None:
    """Scoped api tokens for `tracker serve`, beside its admin token: worker tokens for a set
    of roles, producer tokens for a set of pipelines, read-only tokens."""


@token_group.command("create", short_help="Make a scoped token; its value is shown once.")
@click.argument("name")
@click.option(
    "--kind",
    type=click.Choice(["worker", "producer", "read"]),
    required=True,
    help="worker: claim and report for --role; producer: submit to and read --pipeline;"
    " read: reads only (queue, tasks, runs, events, the dashboard without buttons).",
)
@click.option("--role", "roles", multiple=True, help="A role a worker token may claim.")
@click.option(
    "--pipeline", "pipelines", multiple=True, help="A pipeline (name) a producer token may use."
)
@_TOKENS_OPTION
@_TRACKER_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the token and its value as JSON.")
def create_command(
    name: str,
    kind: str,
    roles: tuple[str, ...],
    pipelines: tuple[str, ...],
    tokens_file: Path | None,
    tracker_url: str | None,
    as_json: bool,
) -> None:
    """Make the scoped token NAME (who holds it: a host, an application) and print its value
    once. Give it to its holder as a file (`--token-file`) or `BACKLOG_WORKER_API_TOKEN`.

    \\b
    backlog-worker token create host-a --kind worker --role coder --role review
    backlog-worker token create billing-app --kind producer --pipeline invoices
    backlog-worker token create grafana --kind read
    """
    with input_errors():
        store = _store(tokens_file, tracker_url)
        token, value = store.create(name, kind, roles=roles, pipelines=pipelines)
    if as_json:
        click.echo(json.dumps({**token.as_json(), "token": value}))
        return
    click.echo(value)
    click.echo(
        f"created {token.kind} token {token.name!r} ({token.id}, {token.scope()}) in "
        f"{store.path}; the value above is shown this once",
        err=True,
    )


@token_group.command("list", short_help="The scoped tokens (never their values).")
@_TOKENS_OPTION
@_TRACKER_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def list_command(tokens_file: Path | None, tracker_url: str | None, as_json: bool) -> None:
    """Every scoped token: id, name, kind, scope and when it was made."""
    with input_errors():
        store = _store(tokens_file, tracker_url)
        tokens = store.load()
    if as_json:
        click.echo(
            json.dumps([{k: v for k, v in t.as_json().items() if k != "sha256"} for t in tokens])
        )
        return
    if not tokens:
        click.echo(f"no scoped tokens in {store.path}")
        return
    for t in tokens:
        click.echo(f"{t.id}  {t.name:<20}  {t.kind:<8}  {t.scope():<30}  {t.created_at}")


@token_group.command("revoke", short_help="Remove a scoped token (by id or name).")
@click.argument("which")
@_TOKENS_OPTION
@_TRACKER_OPTION
def revoke_command(which: str, tokens_file: Path | None, tracker_url: str | None) -> None:
    """Remove the token whose id or name is WHICH; a running server refuses it within a
    second (rotate: create the new one, hand it out, then revoke the old)."""
    with input_errors():
        store = _store(tokens_file, tracker_url)
        token = store.revoke(which)
    click.echo(f"revoked {token.kind} token {token.name!r} ({token.id})")


def register(group: click.Group) -> None:
    """Add ``token`` to the ``backlog-worker`` group."""
    group.add_command(token_group)
