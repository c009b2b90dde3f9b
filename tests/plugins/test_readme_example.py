"""The executor pages' examples run as written: the plugin of docs/executors/plugin-api.md, its
test on docs/executors/harness.md, the plain function of docs/executors/python-jobs.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from plugins.api import Transition
from plugins.registry import load_executor
from plugins.testing import ExecutorHarness
from tests.docs.blocks import ROOT, find
from tracker_client.errors import ExecutorError

pytestmark = pytest.mark.anyio

PLUGIN_PAGE = "docs/executors/plugin-api.md"
HARNESS_PAGE = "docs/executors/harness.md"
JOBS_PAGE = "docs/executors/python-jobs.md"


async def test_readme_plugin_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module_code = find(PLUGIN_PAGE, lang="python").body
    test_code = find(HARNESS_PAGE, lang="python").body
    entry_points = find(PLUGIN_PAGE, lang="toml").body
    assert 'greeter = "mypkg.executors:Greeter"' in entry_points
    # the shipped package registers its executor the way the page says
    shipped = (ROOT / "examples" / "executor-plugin" / "pyproject.toml").read_text()
    assert entry_points.splitlines()[0] in shipped
    pkg = tmp_path / "site" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "executors.py").write_text(module_code)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "mypkg", raising=False)
    monkeypatch.delitem(sys.modules, "mypkg.executors", raising=False)
    namespace: dict[str, object] = {}
    exec(compile(test_code, HARNESS_PAGE, "exec"), namespace)
    test_fn = namespace["test_greeter"]
    await test_fn(tmp_path / "work")  # type: ignore[operator]
    # the factory path a role would name, and its option check
    assert type(load_executor("mypkg.executors:Greeter", {})).__name__ == "Greeter"
    with pytest.raises(ExecutorError, match="option 'greeting' must be a string"):
        load_executor("mypkg.executors:Greeter", {"greeting": 1})


async def test_readme_plain_def_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs_code = find(JOBS_PAGE, lang="python", after="## Plain functions").body
    pkg = tmp_path / "site" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "jobs.py").write_text(jobs_code)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "mypkg", raising=False)
    monkeypatch.delitem(sys.modules, "mypkg.jobs", raising=False)
    text = tmp_path / "in.txt"
    text.write_text("one two\nthree\n")
    options = {"callable": "mypkg.jobs:count_words", "out_dir": str(tmp_path / "out")}
    harness = ExecutorHarness(metadata={"file": str(text)}, options=options)
    assert await harness.run(load_executor("python", options)) == Transition("complete")
    assert harness.events == [("progress", {"words": 3})]
    (artifact,) = harness.artifacts
    kept = tmp_path / "out" / f"{harness.run_model.id}.txt"
    assert artifact.uri == kept.as_uri() and kept.read_text() == "3\n"
