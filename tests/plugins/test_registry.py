"""plugins.registry: entry-point discovery and every way loading an executor can go wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from plugins.api import ENTRY_POINT_GROUP
from plugins.registry import installed_executors, load_executor
from tracker_client.errors import ExecutorError

FAKE_MODULE = """
from plugins.api import Transition
from tracker_client.errors import ExecutorError


class Good:
    def __init__(self, options):
        if "bad" in options:
            raise ExecutorError("option 'bad' is not allowed")
        self.options = options

    async def execute(self, ctx):
        return Transition()


class Crashing:
    def __init__(self, options):
        raise KeyError("boom")


def not_an_executor(options):
    return 42


class SyncExecute:
    def __init__(self, options):
        pass

    def execute(self, ctx):
        return None


NOT_CALLABLE = "just a string"
"""


@pytest.fixture
def fake_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real (tiny) installed distribution on sys.path registering test executors."""
    site = tmp_path / "site"
    dist = site / "fake_executors-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-executors\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            f"""\
            [{ENTRY_POINT_GROUP}]
            good = fake_executors_mod:Good
            crashing = fake_executors_mod:Crashing
            not-executor = fake_executors_mod:not_an_executor
            sync = fake_executors_mod:SyncExecute
            not-callable = fake_executors_mod:NOT_CALLABLE
            missing-module = no_such_module_xyz:Thing
            missing-attr = fake_executors_mod:Absent
            """
        )
    )
    (site / "fake_executors_mod.py").write_text(FAKE_MODULE)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_builtins_are_listed() -> None:
    names = installed_executors()
    assert {"command", "python", "nullclaw"} <= set(names)
    assert names["command"].value == "plugins.command:CommandExecutor"


def test_loads_entry_point_with_options(fake_dist: Path) -> None:
    executor = load_executor("good", {"x": 1})
    assert type(executor).__name__ == "Good"
    assert executor.options == {"x": 1}  # type: ignore[attr-defined]
    assert "good" in installed_executors()


def test_loads_import_path_directly(fake_dist: Path) -> None:
    executor = load_executor("fake_executors_mod:Good", {})
    assert type(executor).__name__ == "Good"


def test_missing_plugin_names_it_and_lists_installed(fake_dist: Path) -> None:
    with pytest.raises(ExecutorError) as info:
        load_executor("gretter", {})
    message = str(info.value)
    assert "'gretter'" in message
    assert "installed: " in message
    assert "command" in message
    assert "good" in message
    assert ENTRY_POINT_GROUP in message


def test_option_error_is_prefixed_with_the_plugin(fake_dist: Path) -> None:
    with pytest.raises(ExecutorError, match=r"executor 'good': option 'bad' is not allowed"):
        load_executor("good", {"bad": True})


def test_factory_raising_is_wrapped(fake_dist: Path) -> None:
    with pytest.raises(ExecutorError, match=r"'crashing' failed to build.*KeyError.*boom"):
        load_executor("crashing", {})


@pytest.mark.parametrize("name", ["not-executor", "sync"])
def test_factory_returning_non_executor(fake_dist: Path, name: str) -> None:
    with pytest.raises(ExecutorError, match=rf"'{name}' built a .*async def execute"):
        load_executor(name, {})


def test_entry_point_not_callable(fake_dist: Path) -> None:
    with pytest.raises(ExecutorError, match=r"'not-callable' names a str, not a factory"):
        load_executor("not-callable", {})


def test_import_failure_names_plugin(fake_dist: Path) -> None:
    with pytest.raises(ExecutorError, match=r"'missing-module' .*failed to load.*no_such_module"):
        load_executor("missing-module", {})
    with pytest.raises(ExecutorError, match=r"'missing-attr' .*failed to load"):
        load_executor("missing-attr", {})


def test_bad_import_paths() -> None:
    with pytest.raises(ExecutorError, match="cannot import module 'no_such_mod_xyz'"):
        load_executor("no_such_mod_xyz:Thing", {})
    with pytest.raises(ExecutorError, match="has no attribute 'Nope'"):
        load_executor("plugins.api:Nope", {})
    with pytest.raises(ExecutorError, match=r"must look like 'package\.module:attribute'"):
        load_executor(":Thing", {})


def _dist(site: Path, name: str, entry_points: str) -> None:
    """A real installed distribution ``name`` in ``site`` with this ``entry_points.txt``."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_duplicate_name_first_wins_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "dup-one", f"[{ENTRY_POINT_GROUP}]\ntwin = one_mod:Twin\n")
    _dist(second, "dup-two", f"[{ENTRY_POINT_GROUP}]\ntwin = two_mod:Twin\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    with caplog.at_level("WARNING", logger="backlog_worker.executor.registry"):
        found = installed_executors()
    assert found["twin"].value == "one_mod:Twin"
    assert "'twin' is registered twice (one_mod:Twin and two_mod:Twin)" in caplog.text


def test_a_plugin_may_take_a_builtin_name_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A distribution ahead of backlog-worker's on the path registering ``python`` is the one
    used, with the duplicate named."""
    site = tmp_path / "site"
    _dist(site, "my-python", f"[{ENTRY_POINT_GROUP}]\npython = my_python:Executor\n")
    monkeypatch.syspath_prepend(str(site))
    with caplog.at_level("WARNING", logger="backlog_worker.executor.registry"):
        found = installed_executors()
    assert found["python"].value == "my_python:Executor"
    assert "'python' is registered twice" in caplog.text
