"""A virtual environment per measured system, so each one's memory is its own.

A worker's peak RSS is mostly the modules it imports, and some peers import what happens to be
installed: huey imports redis-py when it is there (and redis-py imports ``cryptography`` when
that is there), so in the bench extra's shared venv huey reads ~44 MiB, in a venv of its own
~24. :func:`python_for` gives each system the interpreter of a venv holding only that system's
own requirements, made once under :data:`CACHE` (``.bench-venvs/<system>/<hash>``, ignored by
git; one per distinct requirement list, so an older source tree gets its own):

* ``huey``, ``pgqueuer``, ``arq``, ``celery``, ``procrastinate``: the peer's pinned range from
  this project's ``bench`` extra (``pyproject.toml``), with what the bench's peer runner
  imports beside it (PgQueuer's runner: asyncpg and uvloop, both PgQueuer's own requirements);
* ``ours``: this project's runtime dependencies (``[project].dependencies``) only, the tree
  itself on ``PYTHONPATH`` (so an older source tree, ``bench.memory --root``, runs on it too);
* ``ours-postgres``: the same plus the ``postgres`` extra (psycopg, psycopg-pool).

Each venv is made with ``python -m venv --without-pip`` and filled by this interpreter's pip
(``pip --python``), so neither pip nor setuptools (nor setuptools' start-up ``.pth``) is in it:
what a measured process finds on its path is what its system needs. pip installs from the
indexes and wheel directories its own configuration names. :func:`summary` says what a venv
holds (its distributions, counted), to be printed with the figures.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the venvs live (``.gitignore`` lists it).
CACHE = ROOT / ".bench-venvs"
#: The systems with a venv of their own.
SYSTEMS = ("huey", "pgqueuer", "arq", "celery", "procrastinate", "ours", "ours-postgres")
#: Each peer's distributions in the bench extra (the first is the peer itself): what its
#: runner in :mod:`bench.peer_workers` imports.
_PEER_DISTS = {
    "huey": ("huey",),
    "pgqueuer": ("pgqueuer", "asyncpg"),
    "arq": ("arq",),
    "celery": ("celery", "redis"),
    "procrastinate": ("procrastinate",),
}
#: What the ``bench`` extra leaves to a peer's own requirements but its runner imports by
#: name (PgQueuer's runner runs it on uvloop, a requirement of PgQueuer's own).
_RUNNER_EXTRAS = {"pgqueuer": ("uvloop",)}


def _dist_name(requirement: str) -> str:
    """The normalized distribution name of a requirement line (``pgqueuer[asyncpg]>=1.6``)."""
    name = re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(system: str, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The requirement lines ``system``'s venv is made from (see the module docstring)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    if system == "ours":
        return list(project["dependencies"])
    if system == "ours-postgres":
        return [*project["dependencies"], *extras["postgres"]]
    if system not in _PEER_DISTS:
        raise ValueError(f"no venv for {system!r}; known: {', '.join(SYSTEMS)}")
    wanted = _PEER_DISTS[system]
    found = [r for r in extras["bench"] if _dist_name(r) in wanted]
    if {_dist_name(r) for r in found} != set(wanted):
        raise ValueError(f"the bench extra in {pyproject} lacks one of {', '.join(wanted)}")
    return [*found, *_RUNNER_EXTRAS.get(system, ())]


def python_for(system: str, pyproject: Path = ROOT / "pyproject.toml", log: bool = True) -> str:
    """The interpreter of a venv holding ``system``'s requirements as ``pyproject`` declares
    them (an older source tree's own, for ``ours``), made the first time they are asked for."""
    reqs = requirements(system, pyproject)
    stamp = hashlib.sha256(json.dumps([sys.version, reqs]).encode()).hexdigest()
    where = CACHE / system / stamp[:12]
    python = where / "bin" / "python"
    done_file = where / "complete"
    if python.exists() and done_file.exists():
        return str(python)
    if log:
        print(f"making the {system} venv ({', '.join(reqs)}) in {where}", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "venv", "--clear", "--without-pip", str(where)], check=True
    )
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *reqs],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"pip could not fill the {system} venv: {done.stderr[-2000:]}")
    done_file.write_text("\n".join(reqs) + "\n")
    return str(python)


def distributions(python: str) -> list[str]:
    """``name==version`` of every distribution in the venv of ``python``, sorted."""
    found = []
    venv = Path(python).parents[1]
    for meta in sorted(venv.glob("lib/python*/site-packages/*.dist-info/METADATA")):
        fields = dict(
            line.split(": ", 1)
            for line in meta.read_text(errors="replace").split("\n\n", 1)[0].splitlines()
            if ": " in line
        )
        found.append(f"{fields.get('Name', meta.parent.name)}=={fields.get('Version', '?')}")
    return sorted(found, key=str.lower)


def summary(system: str, python: str) -> str:
    """One line: how many distributions ``system``'s venv (``python``'s) holds, and which."""
    dists = distributions(python)
    return f"{system} venv: {len(dists)} packages ({', '.join(dists)})"
