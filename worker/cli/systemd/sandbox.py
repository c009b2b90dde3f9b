"""The sandbox of the rendered units, fitted to where this install and its configured paths are.

The hardening (:func:`hardening_lines`) hides parts of the file system: ``ProtectHome=yes``
makes ``/home``, ``/root`` and ``/run/user`` inaccessible, ``PrivateTmp=yes`` gives the service
an empty ``/tmp`` and ``/var/tmp`` of its own, and ``ProtectSystem=strict`` makes everything
read-only except the state directory. A unit generated from a virtualenv in ``/tmp`` or
``/home``, or for a config whose rail lives in ``/srv``, would therefore fail to start (or fail
its first write). :func:`plan_placement` looks at every such path and decides:

- under ``/tmp`` or ``/var/tmp``: refuse (:class:`UnitRefused`) unless ``allow_tmp``, because
  ``PrivateTmp`` hides it and ``/tmp`` does not outlive a reboot; with ``allow_tmp`` the unit
  drops ``PrivateTmp`` and gives the worker a temporary directory in its state directory;
- under a home directory: ``ProtectHome=read-only`` instead of ``yes``, with a warning;
- written to (rail directory, workdir, executor directories) outside the state directory:
  listed in ``ReadWritePaths=``, with a warning when the directory does not exist yet (systemd
  refuses to start a unit whose ``ReadWritePaths=`` is missing).

It may touch the file system read-only (the install's and the configured paths, the ``--config``
files, the password database) and the embedded rail's URL parser
(:func:`tracker_client.factory.parse_sqlite_url`); it writes nothing.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import sys
import textwrap
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "ConfiguredPath",
    "Placement",
    "UnitRefused",
    "config_paths",
    "escape",
    "exec_arg",
    "hardening_lines",
    "install_paths",
    "note_lines",
    "plan_placement",
    "rail_dir",
    "service_home",
]

_PLAIN_ARG = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
#: What ``ProtectHome=yes`` hides.
HOME_ROOTS = ("/home", "/root", "/run/user")
#: What ``PrivateTmp=yes`` replaces with the service's own empty directories.
TMP_ROOTS = ("/tmp", "/var/tmp")  # noqa: S108 - names the directories, creates nothing
#: The system units' ``StateDirectory=``: always writable, never needs ``ReadWritePaths=``.
STATE_DIR = "/var/lib/backlog-worker"
#: Executor options naming a directory the executor writes (nullclaw, command).
_WRITTEN_OPTIONS = ("home", "workspace_dir", "answers_dir", "cwd", "artifacts_dir")
#: Executor options naming a file the executor only reads.
_READ_OPTIONS = ("prompt_template_file",)


def escape(text: str) -> str:
    """Escape literal text for a unit file: ``%`` starts a specifier, ``$`` a variable."""
    return text.replace("%", "%%").replace("$", "$$")


def exec_arg(text: str) -> str:
    """One ExecStart argument; quoted when it holds anything but plain path characters."""
    if _PLAIN_ARG.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class UnitRefused(ValueError):
    """The unit would not work where it is generated; the message says why and what to do."""


@dataclass(frozen=True)
class ConfiguredPath:
    """A path the service must reach: where it comes from, and whether it is written."""

    label: str
    path: str
    writable: bool = False


@dataclass(frozen=True)
class Placement:
    """How the sandbox bends around the paths: the directives and what to tell the operator."""

    protect_home: str = "yes"
    private_tmp: bool = True
    read_write: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _under(path: str, roots: Iterable[str]) -> str | None:
    """The first of ``roots`` that ``path`` is (or is inside), else None."""
    pure = PurePosixPath(os.path.normpath(path))
    for root in roots:
        if pure == PurePosixPath(root) or PurePosixPath(root) in pure.parents:
            return root
    return None


def install_paths(exec_start: Sequence[str]) -> list[ConfiguredPath]:
    """The paths the service needs to run this install: ExecStart's program, the interpreter's
    prefix (a virtualenv) and the ``worker`` package itself (an editable install lives in its
    source tree, wherever the virtualenv is)."""
    import worker

    package = Path(worker.__file__).resolve().parent
    found = [
        ConfiguredPath("ExecStart", exec_start[0]),
        ConfiguredPath("the Python environment (sys.prefix)", sys.prefix),
        ConfiguredPath("the worker package", str(package)),
    ]
    return found


def service_home(service_user: str) -> list[ConfiguredPath]:
    """The service user's home when ``ProtectHome=`` would hide it: tools an executor runs
    (git, pip, npm) write there (``~/.cache``, ``~/.gitconfig``). Nothing when the user does
    not exist yet or lives elsewhere (``useradd --home-dir /var/lib/backlog-worker``)."""
    try:
        home = pwd.getpwnam(service_user).pw_dir
    except KeyError:
        return []
    if not _under(home, HOME_ROOTS):
        return []
    return [ConfiguredPath(f"the home of User={service_user}", home, writable=True)]


def rail_dir(url: str) -> str | None:
    """The directory of an embedded rail's file when the URL names an absolute one."""
    from tracker_client.factory import parse_sqlite_url

    if not (url.startswith("sqlite:") or url.startswith("/")):
        return None  # a remote tracker, or a relative path (inside the working directory)
    path, _ = parse_sqlite_url(url)
    if path == ":memory:" or not path.startswith("/"):
        return None
    return os.path.dirname(os.path.normpath("/" + path.lstrip("/")))


def config_paths(config: Path) -> list[ConfiguredPath]:
    """The absolute paths a worker config names: rail directory, workdir, token file, the
    python_path directories (made absolute against the config's directory), executor
    directories. Read straight from the TOML (no validation, no token read: the token file is
    often root-only); relative paths stay inside the working directory or the credentials
    directory, which the unit provides."""
    with config.open("rb") as fh:
        data = tomllib.load(fh)
    found: list[ConfiguredPath] = []
    tracker: dict[str, Any] = data.get("tracker") or {}
    url = tracker.get("url")
    if isinstance(url, str):
        rail = rail_dir(url)
        if rail:
            found.append(
                ConfiguredPath(f"{config}: tracker.url (the rail's directory)", rail, True)
            )
    token = tracker.get("api_token_file")
    if isinstance(token, str) and token.startswith("/"):
        found.append(ConfiguredPath(f"{config}: tracker.api_token_file", token))
    worker: dict[str, Any] = data.get("worker") or {}
    workdir = worker.get("workdir")
    if isinstance(workdir, str) and workdir.startswith("/"):
        found.append(ConfiguredPath(f"{config}: worker.workdir", workdir, True))
    python_path = worker.get("python_path")
    for entry in python_path if isinstance(python_path, list) else ():
        if isinstance(entry, str) and entry:
            # read by the service: relative to the config file, as the worker resolves it
            where = os.path.normpath(config.absolute().parent / entry)
            found.append(ConfiguredPath(f"{config}: worker.python_path", where))
    for role in data.get("roles") or []:
        options = role.get("options") or {} if isinstance(role, dict) else {}
        name = role.get("name", "?") if isinstance(role, dict) else "?"
        for key in (*_WRITTEN_OPTIONS, *_READ_OPTIONS):
            value = options.get(key)
            if not isinstance(value, str) or not value.startswith("/"):
                continue
            # a templated cwd ("/srv/{task.id}"): the fixed part before the first placeholder
            value = value.split("{", 1)[0].rstrip("/") or "/"
            if value != "/":
                label = f"{config}: roles[{name}].options.{key}"
                found.append(ConfiguredPath(label, value, key in _WRITTEN_OPTIONS))
    return found


def _identity(user: str) -> tuple[int, set[int]] | None:
    """The uid and group ids of ``user``, or None when it does not exist (yet)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return entry.pw_uid, set(os.getgrouplist(user, entry.pw_gid))


def _unreachable(path: str, who: tuple[int, set[int]] | None) -> str | None:
    """The first existing ancestor directory the service user cannot enter, if any (by its
    owner, group and other execute bits; "other" alone when the user does not exist yet)."""
    current = PurePosixPath(os.path.normpath(path))
    for parent in reversed([current, *current.parents]):
        try:
            st = os.stat(parent)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            continue
        if who is not None and st.st_uid == who[0]:
            can = st.st_mode & stat.S_IXUSR
        elif who is not None and st.st_gid in who[1]:
            can = st.st_mode & stat.S_IXGRP
        else:
            can = st.st_mode & stat.S_IXOTH
        if not can:
            return f"{parent} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _tmp_refusal(hits: list[ConfiguredPath]) -> UnitRefused:
    where = "; ".join(f"{p.label} is {p.path}" for p in hits)
    return UnitRefused(
        f"{where}: under /tmp, which the unit's PrivateTmp=yes replaces with an empty"
        " directory of the service's own, and which does not outlive a reboot (systemd-tmpfiles"
        " also ages files out), so the service would fail to start, now or later. Install"
        " where it stays (python3 -m venv /opt/backlog-worker; /opt/backlog-worker/bin/pip"
        " install ...) and keep rails and workdirs out of /tmp, or pass --allow-tmp for a unit"
        " without PrivateTmp (the host's /tmp read-only to the service, its temporary files in"
        " the state directory)."
    )


def note_lines(warnings: Sequence[str]) -> list[str]:
    """The warnings as wrapped ``# NOTE:`` comment lines, so the unit file keeps them too."""
    out: list[str] = []
    for warning in warnings:
        wrapped = textwrap.wrap(warning, 84)
        out += [f"#   NOTE: {wrapped[0]}", *(f"#         {line}" for line in wrapped[1:])]
    return out


def plan_placement(
    paths: Sequence[ConfiguredPath],
    *,
    service_user: str,
    allow_tmp: bool = False,
) -> Placement:
    """Fit the system unit's sandbox to ``paths`` (see the module docstring); raise
    :class:`UnitRefused` for a path under ``/tmp`` unless ``allow_tmp``."""
    tmp_hits = [p for p in paths if _under(p.path, TMP_ROOTS)]
    if tmp_hits and not allow_tmp:
        raise _tmp_refusal(tmp_hits)
    warnings: list[str] = []
    if tmp_hits:
        warnings.append(
            "PrivateTmp=no because "
            + ", ".join(f"{p.label} is {p.path}" for p in tmp_hits)
            + " (--allow-tmp): the host's /tmp is read-only to the service, and the unit is"
            " gone with /tmp at the next reboot"
        )
    home_hits = [p for p in paths if _under(p.path, HOME_ROOTS)]
    if home_hits:
        warnings.append(
            "ProtectHome=read-only instead of yes because "
            + ", ".join(f"{p.label} is {p.path}" for p in home_hits)
            + ": every home directory is readable by the service; install under /opt (or"
            " /usr/local) for ProtectHome=yes"
        )
    closed: dict[str, list[str]] = {}
    who = _identity(service_user)
    for p in paths:
        blocked = _unreachable(p.path, who)
        if blocked:
            closed.setdefault(blocked, []).append(p.label)
    for blocked, labels in closed.items():
        whom = f"User={service_user}" if who is not None else "other users"
        warnings.append(
            f"{blocked} is closed to {whom}, and it holds {', '.join(labels)}: the service"
            " cannot reach it and fails to start"
            + ("" if who is not None else f" unless User={service_user} may enter it")
        )
    read_write: list[str] = []
    for p in paths:
        if not p.writable or _under(p.path, (STATE_DIR,)):
            continue
        target = os.path.normpath(p.path)
        if target not in read_write:
            read_write.append(target)
            if not os.path.isdir(target):
                warnings.append(
                    f"ReadWritePaths={target} ({p.label}) does not exist yet: create it"
                    f" (install -d -o {service_user} -m 0750 {target}) before the first start,"
                    " or systemd refuses to start the unit (status 226/NAMESPACE)"
                )
    return Placement(
        protect_home="read-only" if home_hits else "yes",
        private_tmp=not tmp_hits,
        read_write=tuple(read_write),
        warnings=tuple(warnings),
    )


def hardening_lines(
    placement: Placement | None,
    *,
    memory_deny_write_execute: bool,
    executors: bool = True,
) -> list[str]:
    """The sandbox directives; ``placement`` None for a user unit (the per-user manager cannot
    set up mount namespaces, so only the seccomp-based settings apply there). ``executors``:
    the unit runs executors (the comments say what they may need)."""
    lines = ["UMask=0077", "NoNewPrivileges=yes"]
    if placement is not None:
        lines += [
            "# No capabilities at all: the service runs as an unprivileged user.",
            "CapabilityBoundingSet=",
            "AmbientCapabilities=",
            "ProtectSystem=strict",
            f"ProtectHome={placement.protect_home}",
        ]
        if placement.private_tmp:
            lines.append("PrivateTmp=yes")
        else:
            lines += [
                "# The install is under /tmp (--allow-tmp): no PrivateTmp, so temporary files",
                "# (and the default run directories) go to the state directory.",
                "PrivateTmp=no",
                "Environment=TMPDIR=%S/backlog-worker/tmp",
            ]
        lines += [
            "PrivateDevices=yes",
            "PrivateMounts=yes",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "# Other users' processes are invisible in /proc; its own (executors) are not.",
            "ProtectProc=invisible",
            "RemoveIPC=yes",
        ]
    lines += [
        "RestrictSUIDSGID=yes",
        "RestrictRealtime=yes",
        "LockPersonality=yes",
        *(
            (
                "# Executors that sandbox themselves with namespaces (bubblewrap, Chromium) need",
                "# RestrictNamespaces=no in a drop-in.",
            )
            if executors
            else ()
        ),
        "RestrictNamespaces=yes",
        "# The tracker and providers over TCP, the journal and sd_notify over AF_UNIX.",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "SystemCallArchitectures=native",
        "# Fork, exec, network and files are allowed; mount, ptrace, kernel modules, clock",
        "# and swap are not. A refused call fails with EPERM instead of killing the process.",
        "SystemCallFilter=@system-service",
        "SystemCallErrorNumber=EPERM",
    ]
    if memory_deny_write_execute:
        lines.append("MemoryDenyWriteExecute=yes")
    elif executors:
        lines += [
            "# Not MemoryDenyWriteExecute=yes: JIT runtimes (node, a JVM) that executors start",
            "# abort under it. Python is fine: systemd-unit --memory-deny-write-execute.",
        ]
    if placement is not None and placement.read_write:
        lines.append("# Paths written outside the state directory:")
        lines += [f"ReadWritePaths={_escape_path(path)}" for path in placement.read_write]
    elif placement is not None and executors:
        lines += [
            "# Executors that write outside the state directory need, e.g.:",
            "#ReadWritePaths=/srv/agent-work",
        ]
    return lines


def _escape_path(path: str) -> str:
    """A path for ``ReadWritePaths=``: specifiers escaped, spaces quoted."""
    text = path.replace("%", "%%")
    return f'"{text}"' if any(c.isspace() for c in text) else text
