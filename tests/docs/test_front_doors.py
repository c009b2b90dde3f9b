"""The front doors stay front doors: README.md is short and its links lead somewhere, and the docs'
front page reaches each audience's first question within two clicks."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.blocks import ROOT

_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def links(page: Path) -> list[Path]:
    """The page's relative links, as the files they point at."""
    text = page.read_text(encoding="utf-8")
    return [
        (page.parent / target).resolve()
        for target in _LINK.findall(text)
        if not re.match(r"[a-z]+:", target)
    ]


def test_readme_is_short_and_its_links_resolve() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 200
    found = links(readme)
    assert len(found) >= 20
    assert [p for p in found if not p.exists()] == []


def test_each_audience_is_within_two_clicks_of_the_front_page() -> None:
    index = ROOT / "docs" / "index.md"
    one_click = set(links(index))
    on_disk = [p for p in one_click if p.suffix == ".md" and p.exists()]  # not the generated
    two_clicks = one_click | {p for page in on_disk for p in links(page)}
    docs = ROOT / "docs"
    for page in (
        "operate/systemd.md",  # run under systemd
        "submit/producer.md",  # submit from a web app
        "executors/plugin-api.md",  # write a plugin
        "operate/postgresql.md",  # move to PostgreSQL
    ):
        assert (docs / page).resolve() in two_clicks, page
