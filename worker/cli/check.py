"""``backlog-worker check``: what ``run`` would do, without claiming anything.

It validates the configuration, reaches the tracker (an authenticated read proves the token),
warns about lease TTLs the tracker would clamp, roles no stage names and triggers no stage
has, finds what ``run`` would refuse in ``[metrics]`` and ``[tracing]``
(:mod:`.check_telemetry`), and asks every executor whether it is ready; it exits non-zero on a
problem. It may touch the tracker (reads), the executors' readiness and one short-lived metrics
socket only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import click

from plugins.api import NamedTrigger, SupportsTriggers
from tracker_client.errors import ConfigError, ExecutorError, TrackerError, TrackerUnavailable
from tracker_client.urlmask import mask_url
from worker.cli.check_report import CheckReport
from worker.cli.check_telemetry import check_telemetry
from worker.cli.errors import NO_TOKEN, describe
from worker.cli.prepare import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    build_role,
    config_option,
    fail,
    load_selected,
    open_for_worker,
    overrides_of,
    readiness,
    role_option,
    tracker_option,
)
from worker.cli.token import token_options, token_overrides
from worker.config.importpath import use_python_path
from worker.config.models import Config
from worker.daemon import Role
from worker.triggers import sent_trigger_problems, trigger_problems, unworked_role_problems
from worker.workdirs import check_workdir_base

__all__ = ["check_command", "register"]


def _sent_triggers(role: Role) -> list[NamedTrigger]:
    """The triggers the role's executor says it may send (none when it cannot tell)."""
    if not isinstance(role.executor, SupportsTriggers):
        return []
    return role.executor.triggers()


def _token_detail(url: str, token_source: str, pipelines: int) -> str:
    """What the authenticated read proved: a token only where one was sent, to a served rail."""
    counted = f"{pipelines} pipeline(s)"
    if not url.lower().startswith(("http://", "https://")):
        unused = "" if token_source == NO_TOKEN else f" (the one {token_source} is not used)"
        return f"rail read ({counted}); a rail opened directly takes no api token{unused}"
    if token_source == NO_TOKEN:
        return f"tracker answered without an api token ({counted}): it asks for none"
    return f"tracker accepted the api token {token_source} ({counted})"


def _build(config: Config, report: CheckReport) -> list[Role]:
    """The roles whose executor could be built; each one that could not is a failed check
    (``executors``), and the tracker and the other roles are still checked."""
    use_python_path(config)  # a bad entry is a ConfigError: exit 2, as `run` does
    built = []
    for role in config.roles:
        try:
            built.append(build_role(role))
        except ExecutorError as exc:
            detail = f"role {role.name}: {exc}"
            report.add("executors", "fail", detail, line=f"executor: {detail}")
    return built


async def _check(config: Config, report: CheckReport) -> None:
    for level, text in check_workdir_base(config.worker.workdir):  # writable, and ours
        report.add("workdir", level, text)
    built = _build(config, report)
    check_telemetry(config, report)  # whatever the tracker answers
    refused: ConfigError | None = None
    try:
        await _check_tracker(config, report, built)
    except ConfigError as exc:  # no rail at the path: raised once the executors are checked too
        refused = exc
    for built_role in built:  # whatever the tracker answered
        issues = await readiness([built_role])
        for issue in issues:
            report.add(f"role:{built_role.name}", "fail", issue)
        if not issues:
            detail = f"role {built_role.name}: executor {built_role.config.executor} ready"
            found = built_role.leftovers()
            if found is not None:  # threads of cancelled runs, see docs/operate/long-running.md
                detail += f" ({found[0]} abandoned thread(s) of cancelled runs, cap {found[1]})"
            report.add(f"role:{built_role.name}", "ok", detail)
    if refused is not None:
        raise refused


async def _check_tracker(config: Config, report: CheckReport, built: list[Role]) -> None:
    """Reach the tracker, prove the token, and check lease TTLs and the ``built`` roles'
    triggers against what it answers."""
    url = config.tracker.url
    shown = mask_url(url)  # the lines below show the URL: never its password
    token_source = config.tracker.api_token_source or NO_TOKEN
    try:
        tracker = await open_for_worker(config)
    except TrackerError as exc:
        line = f"tracker {shown}: {mask_url(str(exc))}"
        report.add("tracker", "fail", describe(exc, url), line=line)
        return
    check = "tracker"
    try:
        with anyio.fail_after(config.tracker.request_timeout_s * 2):
            health = await tracker.health()
        detail = f"tracker {shown} answered (version {health.version})"
        report.add("tracker", "ok", detail)
        # /health needs no token: an authenticated read proves the api token works.
        check = "api_token"
        with anyio.fail_after(config.tracker.request_timeout_s * 2):
            pipelines = await tracker.list_pipelines()
        report.add("api_token", "ok", _token_detail(url, token_source, len(pipelines)))
        with anyio.fail_after(config.tracker.request_timeout_s * 2):
            ceiling = (await tracker.capabilities()).max_lease_ttl_ms
        for role in config.roles:
            ttl = role.lease_ttl_s or config.worker.lease_ttl_s
            if ceiling is not None and ttl * 1000 > ceiling:
                detail = (
                    f"role {role.name}: lease_ttl_s {ttl:g} exceeds the tracker's "
                    f"{ceiling / 1000:g}s heartbeat reset; it will be clamped"
                )
                report.add(f"lease_ttl:{role.name}", "warn", detail)
        for problem in unworked_role_problems(config.roles, pipelines):
            report.add("roles", "warn", problem)
        for problem in trigger_problems(config.roles, pipelines):
            report.add("triggers", "warn", problem)
        for built_role in built:
            for level, text in sent_trigger_problems(
                built_role.config, _sent_triggers(built_role), pipelines
            ):
                report.add("triggers", level, text)
    except (TrackerUnavailable, TimeoutError) as exc:
        report.add(check, "fail", f"tracker {shown} unreachable: {mask_url(str(exc))}")
    except TrackerError as exc:
        report.add(check, "fail", f"tracker {shown}: {describe(exc, url, token_source)}")
    finally:
        await tracker.aclose()


@click.command("check")
@config_option
@tracker_option
@role_option
@token_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object on stdout: {"ok": ..., "checks": [{"name", "ok", "level", "detail"}]}.',
)
def check_command(
    config_path: Path | None, tracker: str | None, roles: tuple[str, ...], as_json: bool
) -> None:
    """Validate the configuration, reach the tracker and check every executor's readiness."""
    report = CheckReport(as_json=as_json)

    def refuse(exc: ConfigError) -> None:
        if not as_json:
            fail(str(exc), EXIT_CONFIG)
        report.add("configuration", "fail", str(exc))
        report.finish()
        sys.exit(EXIT_CONFIG)

    try:
        config = load_selected(
            config_path, overrides_of(**{"tracker.url": tracker}, **token_overrides()), roles
        )
    except ConfigError as exc:
        refuse(exc)
    report.add(
        "configuration", "ok", f"configuration{f' {config.source}' if config.source else ''}"
    )
    try:
        anyio.run(_check, config, report)
    except ConfigError as exc:  # no rail at the path: the same error and exit code as `run`
        refuse(exc)
    report.finish()
    sys.exit(EXIT_FAILURE if report.failed else EXIT_OK)


def register(group: click.Group) -> None:
    """Add ``check`` to the CLI."""
    group.add_command(check_command)
