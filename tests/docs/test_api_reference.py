"""The Python API reference (docs/_ref/api.py) documents exactly the public face, and what the
project shows its users imports nothing else.

The face is declared in ``docs/_ref/face.py`` and pinned to the code by
``tests/test_public_api.py``; here each generated page is read as mkdocstrings will read it (its
``:::`` directives) and held against the modules' own ``__all__``; the stability page and the
site's navigation are held against the face; and every import of the project in ``examples/``
and in the Python blocks of the pages users read must name a public module and a public name.
"""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from docs._ref import api, pages
from docs._ref.face import FACE, HANDED_OUT, INTERNAL_MEMBERS, PublicModule, public_modules
from tests.docs.blocks import ROOT, blocks, doc_pages

PROJECT = ("plugins", "tracker_client", "worker")
_DIRECTIVE = re.compile(r"^::: (\S+)$", re.MULTILINE)


def _directives(page: str) -> list[str]:
    return _DIRECTIVE.findall(page)


@pytest.mark.parametrize("public", FACE, ids=lambda p: p.module)
def test_each_module_page_documents_exactly_its_public_names(public: PublicModule) -> None:
    page = pages()[public.page]()
    module = importlib.import_module(public.module)
    if public.same_as is not None:
        assert _directives(page) == []
        linked = re.findall(r"\]\([\w.]+\.md#([\w.]+)\)", page)
        home = public.same_as
        assert linked == [f"{home}.{name}" for name in sorted(module.__all__)]
        return
    first, *names = _directives(page)
    assert first == public.module
    assert "members: false" in page.split(f"::: {first}\n", 1)[1].split(":::", 1)[0]
    documented = {name.removeprefix(f"{first}.") for name in names}
    assert len(names) == len(documented)
    if public.whole:
        assert documented == set(module.__all__)
    else:
        assert documented < set(module.__all__)
        assert "Only the names below are public" in page
    assert documented == set(public.names)


def test_a_class_handed_to_users_shows_no_constructor_and_internal_members_are_left_out() -> None:
    for ident in HANDED_OUT:
        module, _, _name = ident.rpartition(".")
        page = pages()[public_modules()[module].page]()
        entry = page.split(f"::: {ident}\n", 1)[1].split(":::", 1)[0]
        assert "merge_init_into_class: false" in entry, ident
    rail = pages()["reference/api/tracker_client.producer.md"]()
    entry = rail.split("::: tracker_client.producer.Rail\n", 1)[1].split(":::", 1)[0]
    assert '"!^tracker$"' in entry
    assert set(INTERNAL_MEMBERS) == {"tracker_client.producer.Rail"}


def test_the_index_lists_every_module_and_the_nav_every_page() -> None:
    index = pages()[api.INDEX]()
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for public in FACE:
        assert f"[`{public.module}`]({public.module}.md)" in index
        home = public.same_as or public.module
        for name in public.names:
            assert f"[`{name}`]({home}.md#{home}.{name})" in index, name
        assert f" {public.page}\n" in nav, f"mkdocs.yml nav lacks {public.page}"
    assert f" {api.INDEX}\n" in nav
    assert " reference/stability.md\n" in nav


def test_the_stability_page_names_the_face_and_its_exceptions() -> None:
    page = (ROOT / "docs/reference/stability.md").read_text(encoding="utf-8")
    for public in FACE:
        assert f"`{public.module}`" in page, public.module
    for ident in HANDED_OUT:
        assert f"`{ident.rsplit('.', 1)[1]}`" in page, ident
    for ident, members in INTERNAL_MEMBERS.items():
        for member in members:
            assert f"`{ident.rsplit('.', 1)[1]}.{member}`" in page


# -- docstrings -------------------------------------------------------------------------------
def test_a_role_to_a_public_name_links_and_one_to_an_internal_name_is_code() -> None:
    scopes = ["plugins.api.ExecutionContext", "plugins.api", ""]
    text = api.markdown_docstring(
        "Returns a :class:`Transition` or :class:`~tracker_client.models.Task`, via "
        ":meth:`report`; the sink is :class:`plugins.agent.AgentSink` (:mod:`plugins.api`). "
        "For example::\n\n    ctx.report()\n",
        scopes,
    )
    assert text == (
        "Returns a [`Transition`][plugins.api.Transition] or "
        "[`Task`][tracker_client.models.Task], via "
        "[`report()`][plugins.api.ExecutionContext.report]; the sink is "
        "`plugins.agent.AgentSink` (`plugins.api`). For example:\n\n    ctx.report()\n"
    )


def test_a_role_to_a_public_name_by_its_defining_module_links_to_its_entry() -> None:
    # Rail is defined in tracker_client.producer.rail, documented as tracker_client.producer.Rail
    assert api.reference_of("tracker_client.producer.rail.Rail", [""]) == (
        "tracker_client.producer.Rail"
    )
    assert api.reference_of("Rail.tracker", ["tracker_client.producer"]) is None  # internal
    # a deprecated name is looked up without its warning (an error under pytest's filter)
    assert api.reference_of("Tracker", ["tracker_client"]) is None


# -- what users are shown imports only the face -----------------------------------------------
def private_imports(source: str, where: str) -> list[str]:
    """``where:line: what`` for each import of the project that is not on the public face."""
    face = {m.module: set(m.names) for m in FACE}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT and alias.name not in face:
                    found.append(f"{where}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PROJECT:
                continue
            names = {alias.name for alias in node.names}
            outside = names - face.get(node.module, set())
            if outside:
                shown = ", ".join(sorted(outside))
                found.append(f"{where}:{node.lineno}: from {node.module} import {shown}")
    return found


#: Pages for the project's contributors, who work on the internals.
CONTRIBUTORS = ("docs/architecture/",)


def _user_python() -> list[tuple[str, str]]:
    found = [
        (path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "examples").rglob("*.py"))
    ]
    for page in doc_pages():
        for block in blocks(page):
            if block.lang in {"python", "py", "pycon"} and not block.page.startswith(CONTRIBUTORS):
                found.append((block.where, block.body))
    return found


def test_examples_and_users_pages_import_only_the_public_face() -> None:
    sources = _user_python()
    assert len(sources) >= 10  # the examples and the pages' blocks were read
    assert any("plugins.api" in text for _, text in sources)
    found = [hit for where, text in sources for hit in private_imports(text, where)]
    assert found == [], "imports of internal names:\n" + "\n".join(found)


def test_the_import_check_sees_an_internal_import() -> None:
    source = (
        "from plugins.api import Transition\n"
        "from plugins.command.executor import CommandExecutor\n"
        "from tracker_client.models import Lease, Task\n"
        "import worker.daemon\n"
    )
    assert private_imports(source, "x.py") == [
        "x.py:2: from plugins.command.executor import CommandExecutor",
        "x.py:3: from tracker_client.models import Lease",
        "x.py:4: import worker.daemon",
    ]
