"""Every package the code imports is declared by what installs that code.

Read from the source (every ``import``, module level or deferred): a module of the packages may
import the standard library, the project's own packages and the distributions named in
``[project] dependencies``; a module of the PostgreSQL rail also the ``postgres`` extra's, the
tracing modules the ``otel`` extra's, the MCP server (``tracker_client/mcp``) the ``mcp``
extra's, ``bench/`` the ``bench`` extra's, ``tests/`` the ``test`` extra's and ``docs/`` (the
site's generator scripts) the ``docs`` extra's. Named directly: a
package that only arrives as someone else's dependency can leave with their next release
(sniffio did, with anyio 4.16). That the extras really install and run is
``tests/packaging/test_wheel.py``'s part.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
OURS = {"worker", "tracker_client", "plugins", "bench", "tests", "docs"}
PACKAGES = ("worker", "tracker_client", "plugins", "bench", "tests", "docs")
#: The extras a module may use beyond the core dependencies, by path prefix (first match).
EXTRA_OF = (
    ("tracker_client/postgres/", ("postgres",)),
    # rail copy reaches PostgreSQL only when a URL names it (require("postgres", ...) first)
    ("tracker_client/railcopy.py", ("postgres",)),
    ("worker/telemetry/tracing.py", ("otel",)),
    ("worker/telemetry/otlpjson.py", ("otel",)),
    ("tracker_client/mcp/", ("mcp",)),
    ("bench/", ("bench",)),
    ("tests/", ("test",)),
    ("docs/", ("docs",)),
)


def _declared(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` name, this project's own extras expanded."""
    names: set[str] = set()
    for line in requirements:
        req = Requirement(line)
        if canonicalize_name(req.name) == canonicalize_name(PROJECT["name"]):
            for extra in req.extras:
                names |= _declared(PROJECT["optional-dependencies"][extra])
        else:
            names.add(canonicalize_name(req.name))
    return names


CORE = _declared(PROJECT["dependencies"])
DISTRIBUTIONS = metadata.packages_distributions()


#: Top-level modules whose distribution is named otherwise, for when it is not installed here
#: (CI runs this before it installs the docs extra).
NAMED_OTHERWISE = {"griffe": "griffelib"}


def _distributions(module: str) -> set[str]:
    """The distributions providing top-level ``module`` (its own name, or the one
    :data:`NAMED_OTHERWISE` gives, when none is installed here, as for the bench extra's
    peers)."""
    fallback = [NAMED_OTHERWISE.get(module, module)]
    return {canonicalize_name(d) for d in DISTRIBUTIONS.get(module, fallback)}


def _imports(path: Path) -> set[str]:
    """The top-level names of every absolute import in ``path``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found - set(sys.stdlib_module_names) - OURS - {"__future__"}


def _allowed(relative: str) -> set[str]:
    for prefix, extras in EXTRA_OF:
        if relative.startswith(prefix):
            return CORE | _declared([f"{PROJECT['name']}[{','.join(extras)}]"])
    return CORE


def test_every_import_of_the_packages_is_declared_where_it_is_used() -> None:
    undeclared = []
    checked = 0
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            allowed = _allowed(relative)
            for module in sorted(_imports(path)):
                checked += 1
                if not _distributions(module) & allowed:
                    undeclared.append(f"{relative}: {module}")
    assert checked > 200
    assert undeclared == [], "\n".join(undeclared)


def test_the_extras_name_their_modules() -> None:
    # tracker_client.extras says which modules an extra brings (for its error messages).
    from tracker_client.extras import EXTRAS

    for extra, modules in EXTRAS.items():
        declared = _declared(PROJECT["optional-dependencies"][extra])
        for module in modules:
            assert _distributions(module) & declared, (extra, module)
