"""Docstring density of the public API, ours against anyio's and httpx's, in one run.

The public API of a package is what its modules export in ``__all__`` (anyio and httpx keep the
code in ``_``-prefixed modules and export it from the package, anyio without ``__all__``: there its
public namespace counts; ours exports per module). For each
exported function and class, and each public method and property a class defines itself, it
counts whether there is a docstring. Density = documented / counted, deduplicated by object.

    python -m bench.docs
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

OURS = ("worker", "tracker_client", "plugins")
PEERS = ("anyio", "httpx")


@dataclass
class Count:
    """Documented and total public definitions, and which ones lack a docstring."""

    documented: int = 0
    total: int = 0
    missing: list[str] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)

    def add(self, name: str, obj: Any) -> None:
        """Count one definition once."""
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        self.total += 1
        if inspect.getdoc(obj) and obj.__doc__:
            self.documented += 1
        else:
            self.missing.append(name)

    @property
    def density(self) -> float:
        """Documented share of the public definitions."""
        return self.documented / self.total if self.total else 0.0


def _members(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value) or isinstance(value, property):
            out.append((name, value))
    return out


def count_exports(module: ModuleType, count: Count) -> None:
    """Count what ``module`` exports in ``__all__`` (functions, classes and their members)."""
    names = getattr(module, "__all__", None)
    if names is None:  # anyio: no __all__, names imported lazily; dir() lists them
        names = [n for n in dir(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name, None)
        owner = getattr(obj, "__module__", "") or ""
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        root = module.__name__.split(".")[0]
        if not owner.startswith(root):
            continue  # a re-export of another library's name
        count.add(f"{module.__name__}.{name}", obj)
        if inspect.isclass(obj):
            for member, value in _members(obj):
                count.add(f"{module.__name__}.{name}.{member}", value)


def modules_of(package: str, *, walk: bool) -> list[ModuleType]:
    """The package and, when ``walk``, every module under it (tests excluded)."""
    root = importlib.import_module(package)
    found = [root]
    if walk:
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if ".tests" in info.name or info.name.endswith("__main__"):
                continue
            found.append(importlib.import_module(info.name))
    return found


def measure(package: str, *, walk: bool) -> Count:
    """Count the public API of ``package``."""
    count = Count()
    for module in modules_of(package, walk=walk):
        count_exports(module, count)
    return count


def main() -> int:
    """Print each package's density and the ratio of ours to each peer."""
    ours = Count()
    rows: list[tuple[str, Count]] = []
    for name in OURS:
        c = measure(name, walk=True)
        rows.append((name, c))
        ours.documented += c.documented
        ours.total += c.total
        ours.missing += c.missing
    rows.append(("backlog-worker", ours))
    peers = {}
    for name in PEERS:
        try:
            peers[name] = measure(name, walk=False)
        except ImportError:
            print(f"{name}: not installed, skipped")
            continue
        rows.append((name, peers[name]))
    print(f"{'package':16} {'documented':>10} {'public':>7} {'density':>8}")
    for name, c in rows:
        print(f"{name:16} {c.documented:>10} {c.total:>7} {c.density:>8.1%}")
    for name, c in peers.items():
        if c.density:
            print(f"ours / {name}: {ours.density / c.density:.2f}x")
    if "-v" in sys.argv:
        print("undocumented:", *ours.missing, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
