"""Code, tests, benches and docs cite the project's own pages, never a file outside the repo.

A reader of a clone has nothing beside it: a docstring that says "see CONTRACT.md s.5" sends them
to a file they don't have. The semantics are written in the project's own words under ``docs/``
(``docs/guarantees/``, ``docs/reference/http-api.md``, ``docs/architecture/index.md``), and that
is what code cites. The one exception is the test that runs NullTickets' own suite from beside
the clone (``tests/remote/test_upstream_e2e.py``), which has to name where it is.
"""

from __future__ import annotations

import re
from pathlib import Path

from docs._ref import pages

ROOT = Path(__file__).resolve().parents[2]

#: Files outside the repo that code used to cite: NullTickets' contract, the backlog semantics,
#: the design notes, NullClaw's CLI notes, and the folder they sit in beside the clone.
OUTSIDE = re.compile(
    r"CONTRACT(\.md|\s+s?\.?\s*\d)|BACKLOG-SEMANTICS|DESIGN\.md|\bCLI\.md|\.\./shared|"
    r"\bshared/(nulltickets|nullclaw)"
)
#: Where the project's own words live: the packages, tests, benches, docs and examples.
TREES = ("worker", "tracker_client", "plugins", "tests", "bench", "docs", "examples", "contrib")
FILES = ("config.example.toml", "mkdocs.yml", "pyproject.toml")
#: May name the outside folder: it runs NullTickets' own end-to-end suite from there.
ALLOWED = {Path("tests/remote/test_upstream_e2e.py"), Path(__file__).resolve().relative_to(ROOT)}


def _texts() -> list[Path]:
    found = [ROOT / name for name in FILES]
    for tree in TREES:
        found += [
            p for p in (ROOT / tree).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    return sorted(p for p in found if p.relative_to(ROOT) not in ALLOWED)


def citations(path: Path) -> list[str]:
    """``path:line: text`` for each line of ``path`` that cites a file outside the repo."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # an image or other binary: no prose in it
        return []
    return [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]


def test_the_pattern_finds_each_old_citation() -> None:
    """The check itself: every form the old citations took is caught, a route is not."""
    for cited in (
        "(CONTRACT.md s.5)",
        "# CONTRACT 6.5: claim",
        "# CONTRACT s.3: Idempotency-Key",
        "rules of BACKLOG-SEMANTICS.md",
        "(DESIGN.md invariant 4)",
        "(CLI.md s.6)",
        "``shared/nulltickets/CONTRACT.md``",
        "../shared/nulltickets/openapi.json",
    ):
        assert OUTSIDE.search(cited), cited
    for fine in ("GET /openapi.json", "the contract table", "docs/guarantees/nulltickets.md"):
        assert not OUTSIDE.search(fine), fine


def test_code_tests_benches_and_docs_cite_only_the_projects_own_pages() -> None:
    files = _texts()
    assert len(files) > 300  # the trees were found (a moved tree must not pass by being empty)
    found = [hit for path in files for hit in citations(path)]
    assert not found, "cite a page under docs/ instead:\n" + "\n".join(found)


def test_the_readme_cites_only_the_projects_own_pages() -> None:
    found = citations(ROOT / "README.md")
    assert not found, "cite a page under docs/ instead:\n" + "\n".join(found)


#: A page of the docs as code cites it: ``docs/guarantees/backlog.md``.
CITED = re.compile(r"\bdocs/([\w/-]+\.md)\b")


def cited_pages() -> dict[str, list[str]]:
    """Each page under ``docs/`` that code, tests or benches cite, with where."""
    found: dict[str, list[str]] = {}
    for tree in ("worker", "tracker_client", "plugins", "tests", "bench"):
        for path in sorted((ROOT / tree).rglob("*")):
            if path.suffix not in (".py", ".sql") or "__pycache__" in path.parts:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for page in CITED.findall(line):
                    found.setdefault(page, []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def _page_exists(page: str) -> bool:
    return (ROOT / "docs" / page).is_file() or page in pages()


def test_every_page_code_cites_exists() -> None:
    cited = cited_pages()
    assert {"reference/http-api.md", "architecture/index.md", "guarantees/backlog.md"} <= set(cited)
    missing = {page: where for page, where in cited.items() if not _page_exists(page)}
    assert not missing, f"cited pages that don't exist: {missing}"
