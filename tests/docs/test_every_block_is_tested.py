"""Every code block a reader would run is run by a test.

Each fenced block of README.md and docs/ must be one of:

- output or a picture: a ``text`` or ``mermaid`` block;
- run by a test: an HTML comment ``<!-- tested-by: tests/x.py -->`` on the line before it,
  naming test files that exist and read that page (they name its path, or read every page);
  words after the files may say what the test covers;
- shown, not run, for a stated reason: ``<!-- illustrative: REASON -->`` (a command that needs
  root, a production host, a provider key);
- a snippet: only ``--8<-- "examples/..."`` lines including a file that a test names.

Anything else fails, listing each untested block as ``page:line``.
"""

from __future__ import annotations

from pathlib import Path

from tests.docs.blocks import ROOT, Block, blocks, doc_pages

PICTURES = {"text", "mermaid"}


def _test_sources() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))


def problem(block: Block, tests_text: str) -> str | None:
    """Why ``block`` is not accounted for, or None when it is."""
    if not block.lang:
        return "no language on the fence (use text for output)"
    if block.lang in PICTURES:
        return None
    if paths := block.snippet_paths:
        for path in paths:
            if not path.startswith("examples/") or not (ROOT / path).is_file():
                return f"includes {path}, not a file under examples/"
            if path not in tests_text and str(Path(path).parent) not in tests_text:
                return f"includes {path}, which no test names"
        return None
    if block.marker == "illustrative":
        return None if block.marker_value else "illustrative without a reason"
    if block.marker == "tested-by":
        names = [w.strip(",;") for w in block.marker_value.split() if w.strip(",;").endswith(".py")]
        if not names:
            return "tested-by names no test file"
        for name in names:
            test = ROOT / name
            if not test.is_file():
                return f"tested-by {name}: no such file"
            text = test.read_text(encoding="utf-8")
            if block.page not in text and "doc_pages" not in text:
                return f"tested-by {name}, which never reads {block.page}"
        return None
    return f"an untested {block.lang} block"


def test_every_block_is_run_by_a_test_or_marked() -> None:
    tests_text = _test_sources()
    found = [b for page in doc_pages() for b in blocks(page)]
    problems = [f"{b.where}: {why}" for b in found if (why := problem(b, tests_text))]
    assert len(found) > 50
    assert problems == [], "\n".join(problems)


def test_an_unmarked_block_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "probe.md"
    page.write_text("# probe\n\n```sh\nbacklog-worker queue\n```\n\n```text\nout\n```\n")
    first, second = blocks(page)
    assert problem(first, "") == "an untested sh block"
    assert problem(second, "") is None
