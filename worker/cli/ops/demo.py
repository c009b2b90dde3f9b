"""``backlog-worker demo``: a temporary rail with workers, live progress and a summary.

It may touch the command line only: the demo itself (its rail, workers and display) is
:mod:`worker.demo`'s, imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from worker.cli.ops.common import EXIT_FAILURE, DurationType, OpsError, input_errors, unwrap_groups

__all__ = ["demo_command"]


@click.command("demo", short_help="Watch tasks flow through a temporary rail (no config).")
@click.option(
    "--tasks",
    "task_count",
    type=click.IntRange(3, 500),
    default=30,
    show_default=True,
    help="How many tasks to run.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=3,
    show_default=True,
    help="Worker processes sharing the rail.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Slots per worker process.",
)
@click.option(
    "--keep",
    "keep_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Keep the rail and configs in this directory.",
)
@click.option(
    "--timeout",
    type=DurationType(),
    default="90s",
    show_default=True,
    help="Give up after this long.",
)
@click.option(
    "as_json",
    "--json",
    is_flag=True,
    help="The summary as one JSON object on stdout (progress lines go to stderr).",
)
def demo_command(
    task_count: int,
    workers: int,
    concurrency: int,
    keep_dir: Path | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Watch tasks flow: a temporary embedded rail, a draft -> review -> done pipeline with a
    reject loop and a dead-letter stage, several worker processes, live progress, a summary.
    """
    from worker.demo import DemoOptions, run_demo

    opts = DemoOptions(
        task_count=task_count,
        workers=workers,
        concurrency=concurrency,
        keep_dir=keep_dir,
        timeout_s=timeout,
        as_json=as_json,
    )
    with input_errors():
        try:
            ok = unwrap_groups(run_demo, opts)
        except OSError as exc:
            raise OpsError(f"demo: {exc.strerror or exc}") from None
        except KeyboardInterrupt:
            click.echo("demo interrupted; its workers were stopped", err=True)
            raise click.exceptions.Exit(130) from None
    if not ok:
        raise click.exceptions.Exit(EXIT_FAILURE)
