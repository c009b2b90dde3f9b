"""Fixtures of the packaging tests: the wheel built once per session, and one fresh venv per
extra installed from that wheel alone (never from this checkout or the test venv).

The venvs are installed at once, in parallel (each mostly waits on the package index), the
first time any of them is asked for; a test waits only for its own. Outside CI, a build or an
install that fails for want of the package index skips, saying so; anything else fails, and in
CI everything fails (:mod:`tests.needs`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import needs

ROOT = Path(__file__).resolve().parents[2]
#: The installs verified: the plain one ("") and every extra a user installs.
EXTRAS = ("", "postgres", "otel", "docs", "bench")
#: pip's and build's words for "the package index can't be reached" (a skip outside CI).
_OFFLINE = re.compile(
    r"No matching distribution found|Could not find a version that satisfies|"
    r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|"
    r"Failed to establish a new connection|ProxyError|ConnectTimeout|Read timed out"
)


def _failed(what: str, proc: subprocess.CompletedProcess[str]) -> None:
    output = (proc.stdout + proc.stderr)[-4000:]
    if _OFFLINE.search(output) and not needs.in_ci():
        pytest.skip(f"{what} needs the package index, which can't be reached here:\n{output}")
    pytest.fail(f"{what} failed (exit {proc.returncode}):\n{output}", pytrace=False)


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """This environment without anything pointing at this checkout or the test venv; with
    ``venv``, its ``bin`` first on ``PATH``."""
    drop = ("PYTHON", "VIRTUAL_ENV", "BACKLOG_WORKER_", "PIP_REQUIRE_VIRTUALENV", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONNOUSERSITE"] = "1"  # nor the user's own site-packages
    env["COLUMNS"] = "120"
    return env


@dataclass(frozen=True)
class Built:
    """The distributions ``python -m build`` made of this checkout (the wheel from the sdist)."""

    wheel: Path
    sdist: Path

    def names(self) -> list[str]:
        """The wheel's file names."""
        with zipfile.ZipFile(self.wheel) as wheel:
            return wheel.namelist()

    def read(self, name: str) -> str:
        """One file of the wheel, as text."""
        with zipfile.ZipFile(self.wheel) as wheel:
            return wheel.read(name).decode("utf-8")


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and the wheel built from it, once per session (``python -m build``)."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=240,
        check=False,
    )
    if proc.returncode != 0:
        _failed("python -m build", proc)
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return Built(wheel, sdist)


@dataclass
class Venvs:
    """The fresh venvs, one per install of :data:`EXTRAS`, being installed in parallel."""

    root: Path
    built: Built
    _installs: dict[str, tuple[subprocess.Popen[str], Path]] = field(default_factory=dict)
    _ready: dict[str, Path] = field(default_factory=dict)

    def start(self) -> None:
        for extra in EXTRAS:
            venv = self.root / (extra or "base")
            subprocess.run(
                [sys.executable, "-m", "venv", "--without-pip", str(venv)],
                check=True,
                timeout=120,
                env=clean_env(),
            )
            target = f"{self.built.wheel}[{extra}]" if extra else str(self.built.wheel)
            log = self.root / f"{extra or 'base'}.log"
            with log.open("w") as fh:
                # pip of the test venv installs INTO the new venv (--python): the venv holds
                # only the wheel and what it declares; the wheel's directory stands in for the
                # index for backlog-worker itself (the extras that name it). --no-compile: no
                # byte-compiling of every installed module up front (what the tests run is
                # compiled as it is imported); it was over half of each install's time.
                proc = subprocess.Popen(
                    [
                        *(sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")),
                        *("install", "--quiet", "--no-compile"),
                        *("--find-links", str(self.built.wheel.parent)),
                        target,
                    ],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=clean_env(),
                )
            self._installs[extra] = (proc, log)

    def get(self, extra: str) -> Path:
        """The venv of ``extra`` ("": the plain install), once its install has ended."""
        if extra in self._ready:
            return self._ready[extra]
        proc, log = self._installs[extra]
        try:
            code = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        if code != 0:
            done = subprocess.CompletedProcess(proc.args, code, log.read_text(), "")
            _failed(f"pip install {extra or 'backlog-worker'} from the wheel", done)
        self._ready[extra] = log.parent / (extra or "base")
        return self._ready[extra]

    def stop(self) -> None:
        for proc, _ in self._installs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def venvs(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venvs]:
    """Every install of :data:`EXTRAS`, each in a fresh venv from the wheel alone."""
    installs = Venvs(tmp_path_factory.mktemp("venvs"), built)
    try:
        installs.start()
        yield installs
    finally:
        installs.stop()


def run_in(
    venv: Path, *args: str, cwd: Path, timeout: float = 90, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``args`` (``backlog-worker ...`` or ``python ...``: the venv's own) run in ``cwd``."""
    program = venv / "bin" / args[0]
    proc = subprocess.run(
        [str(program), *args[1:]],
        cwd=cwd,
        env=clean_env(venv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check:
        assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
    return proc
