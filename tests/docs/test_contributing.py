"""The contributing page (docs/architecture/contributing.md) says what is true: its test command
is the one CI runs, and each benchmark it names exists and takes the options it shows."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture" / "contributing.md"


def sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_the_test_command_is_the_one_ci_runs() -> None:
    command = sh_blocks()[0].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"\n{command} || status=$?\n" in ci, command


def test_each_benchmark_named_exists_with_the_options_shown() -> None:
    text = PAGE.read_text(encoding="utf-8")
    commands = re.findall(r"`python -m (bench\.\w+)([^`]*)`", text)
    commands += re.findall(r"^python -m (bench\.\w+)(.*)$", text, re.M)
    assert len({module for module, _ in commands}) >= 7
    for module, args in commands:
        path = ROOT / (module.replace(".", "/") + ".py")
        assert path.is_file(), module
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        for option in (a for a in shlex.split(args) if a.startswith("--")):
            assert option in doc, f"{module} documents no {option}"


def test_the_targeted_runs_name_tests_that_exist() -> None:
    commands = [line.split("#")[0].split() for line in sh_blocks()[1].strip().splitlines()]
    assert len(commands) == 3
    for words in commands:
        assert words[:3] == [".venv/bin/python", "-m", "pytest"]
        assert (ROOT / words[3]).exists(), words[3]


def test_the_docs_build_is_the_one_ci_runs() -> None:
    block = sh_blocks()[3]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ".venv/bin/pip install -q -e '.[docs]'" in block
    assert ".venv/bin/pip install -q -e '.[docs]'" in ci
    assert ".venv/bin/mkdocs build --strict --site-dir" in block
    assert ".venv/bin/mkdocs build --strict --site-dir" in ci
