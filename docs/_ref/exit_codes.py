"""The exit codes reference: :data:`worker.cli.errors.EXIT_CODES`, the one table every
``backlog-worker`` command exits by, and which error becomes which code
(:func:`worker.cli.errors.exit_code_for`)."""

from __future__ import annotations

from .markdown import code, table, text


def exit_codes() -> dict[int, str]:
    """Every exit code and its meaning, in order."""
    from worker.cli.errors import EXIT_CODES

    return dict(sorted(EXIT_CODES.items()))


def _names() -> dict[int, str]:
    from worker.cli import errors

    return {
        getattr(errors, name): name
        for name in errors.__all__
        if name.startswith("EXIT_") and isinstance(getattr(errors, name), int)
    }


def _errors_by_code() -> dict[int, list[str]]:
    """Which of the rail's errors (:mod:`tracker_client.errors`) exits with which code."""
    from tracker_client import errors
    from worker.cli.errors import exit_code_for

    found: dict[int, list[str]] = {}
    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.BacklogWorkerError):
            # exit_code_for reads only the error's class: an instance made without its
            # constructor's arguments (BacklogFull takes role, depth, cap) is enough.
            found.setdefault(exit_code_for(cls.__new__(cls)), []).append(name)
    return found


def page() -> str:
    """The whole exit codes page."""
    names = _names()
    by_code = _errors_by_code()
    rows = [
        [
            code(number),
            code(names.get(number, "")),
            text(meaning),
            ", ".join(code(n) for n in by_code.get(number, [])),
        ]
        for number, meaning in exit_codes().items()
    ]
    return (
        "# Exit codes\n\n"
        "Every `backlog-worker` command exits with one of these codes, generated from the "
        "CLI's own table (`worker/cli/errors.py`) when the docs are built. An expected failure "
        "is printed as one line on stderr (`error: ...`), never a traceback; a script can "
        "branch on the code. The last column says which of the rail's errors "
        "(`tracker_client.errors`) a command exits with that code for.\n\n"
        + table(["code", "name", "meaning", "errors"], rows)
    )
