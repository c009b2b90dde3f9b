"""The README's "Writing an executor plugin" examples run as written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from plugins.api import Transition
from plugins.registry import load_executor
from plugins.testing import ExecutorHarness
from tracker_client.errors import ExecutorError

pytestmark = pytest.mark.anyio

README = Path(__file__).resolve().parents[2] / "README.md"


def section_blocks(lang: str) -> list[str]:
    text = README.read_text()
    start = text.index("## Writing an executor plugin")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


async def test_readme_plugin_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module_code, test_code, _ = section_blocks("python")
    (entry_points,) = section_blocks("toml")
    assert 'greeter = "mypkg.executors:Greeter"' in entry_points
    pkg = tmp_path / "site" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "executors.py").write_text(module_code)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "mypkg", raising=False)
    monkeypatch.delitem(sys.modules, "mypkg.executors", raising=False)
    namespace: dict[str, object] = {}
    exec(compile(test_code, "README.md", "exec"), namespace)
    test_fn = namespace["test_greeter"]
    await test_fn(tmp_path / "work")  # type: ignore[operator]
    # the factory path a role would name, and its option check
    assert type(load_executor("mypkg.executors:Greeter", {})).__name__ == "Greeter"
    with pytest.raises(ExecutorError, match="option 'greeting' must be a string"):
        load_executor("mypkg.executors:Greeter", {"greeting": 1})


async def test_readme_plain_def_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    *_, jobs_code = section_blocks("python")
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
