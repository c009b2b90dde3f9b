"""The wire contract is neutral ground: the worker and the rails never import the HTTP client.

The operations table, wire models, batch models and error table live in
:mod:`tracker_client.contract`; the HTTP client (:mod:`tracker_client.nulltickets`) is one of
its users, as are the served tracker, the embedded and PostgreSQL rails and the worker. This
reads every source file of those (their import statements, at any depth, ``TYPE_CHECKING``
blocks included) and fails on any import of ``tracker_client.nulltickets`` not listed in
:data:`EXCEPTIONS` with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENT = "tracker_client.nulltickets"

#: The sources that must not import the HTTP client: the worker, the contract itself, the rails
#: (embedded, PostgreSQL, served) and the rail-neutral protocol and typed calls.
NEUTRAL = (
    "worker",
    "tracker_client/contract",
    "tracker_client/embedded",
    "tracker_client/postgres",
    "tracker_client/serve",
    "tracker_client/protocol.py",
    "tracker_client/calls.py",
)

#: (file, imported module) -> why that file may import the HTTP client.
EXCEPTIONS = {
    ("worker/cli/ops/common.py", "tracker_client.nulltickets.options"): (
        "the operator commands open a remote rail themselves and hand the HTTP client its retry "
        "settings (OPERATOR_RETRY): an option of the client, not of the contract"
    ),
}


def _sources() -> list[Path]:
    files: list[Path] = []
    for name in NEUTRAL:
        path = ROOT / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def _imported(tree: ast.AST) -> list[str]:
    """Every module an import statement of ``tree`` names.

    ``from a import b`` names ``a``, or ``a.b`` when ``a`` is the client's package (``b`` is then
    one of its modules).
    """
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == CLIENT:
                names.extend(f"{CLIENT}.{alias.name}" for alias in node.names)
            else:
                names.append(node.module)
    return names


def _client_imports() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name in _imported(tree):
            if name == CLIENT or name.startswith(CLIENT + "."):
                found.add((path.relative_to(ROOT).as_posix(), name))
    return found


def test_the_worker_and_the_rails_never_import_the_http_client() -> None:
    assert len(_sources()) > 100  # the walk reads the real tree, not an empty folder
    unexpected = sorted(_client_imports() - EXCEPTIONS.keys())
    assert not unexpected, f"imports of the HTTP client's package from neutral code: {unexpected}"


def test_every_exception_is_still_needed() -> None:
    stale = sorted(EXCEPTIONS.keys() - _client_imports())
    assert not stale, f"exceptions no import needs any more (remove them): {stale}"


def test_the_check_sees_an_import_inside_a_function() -> None:
    tree = ast.parse("def f():\n    from tracker_client.nulltickets import lean\n")
    assert "tracker_client.nulltickets.lean" in _imported(tree)
