"""Run ``backlog-worker`` as if some packages were not installed (a child process of the tests).

``python without_extras.py BLOCKED RECORD help-tree``: walk the whole click tree and print, as
JSON, every command path whose ``--help`` did not exit 0 (with its output).
``python without_extras.py BLOCKED RECORD cli ARGS...``: run ``backlog-worker ARGS``.

``BLOCKED`` is a comma-separated list of top-level packages made unimportable by an import hook
first on ``sys.meta_path`` (exactly what a missing distribution looks like: a
``ModuleNotFoundError`` naming the module). Every attempt to import one of them is written to
the JSON file ``RECORD`` at exit, so a test also sees an import that was tried and swallowed.
"""

from __future__ import annotations

import atexit
import json
import sys
from importlib.machinery import ModuleSpec
from typing import Any


class _Blocked:
    """The import hook: refuses the blocked packages and remembers who asked."""

    def __init__(self, blocked: set[str]) -> None:
        self.blocked = blocked
        self.tried: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name.partition(".")[0] in self.blocked:
            self.tried.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _tree(group: Any) -> list[list[str]]:
    """Every command path under ``group`` (the group itself first)."""
    import click

    paths: list[list[str]] = [[]]
    todo: list[tuple[Any, list[str]]] = [(group, [])]
    while todo:
        command, path = todo.pop()
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, [*path, name]
                paths.append([*path, name])
                todo.append((sub, [*path, name]))
    return paths


def main() -> None:
    blocked, record, mode, *args = sys.argv[1:]
    hook = _Blocked({b for b in blocked.split(",") if b})
    sys.meta_path.insert(0, hook)

    def _write() -> None:
        with open(record, "w", encoding="utf-8") as fh:
            json.dump(sorted(set(hook.tried)), fh)

    atexit.register(_write)
    from worker.cli import main as cli

    if mode == "cli":
        sys.argv = ["backlog-worker", *args]
        cli()
        return
    from click.testing import CliRunner

    runner = CliRunner()
    failed = []
    paths = _tree(cli)
    for path in paths:
        result = runner.invoke(cli, [*path, "--help"])
        if result.exit_code != 0 or "Usage:" not in result.output:
            failed.append(
                {
                    "path": path,
                    "code": result.exit_code,
                    "output": result.output,
                    "exception": repr(result.exception),
                }
            )
    print(json.dumps({"commands": len(paths), "failed": failed}))


if __name__ == "__main__":
    main()
