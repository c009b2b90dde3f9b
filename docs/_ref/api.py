"""The Python API reference: one page per public module of :data:`docs._ref.face.FACE`, each
naming exactly the module's public names, and an index grouping the modules by who imports them.

A page is a mkdocstrings directive (``::: plugins.api`` with ``members:`` the public names), so
the signatures and docstrings are read from the code when the site is built; nothing of them is
copied here. A name that is not in the face has no page, which is what "internal" means on the
stability page (docs/reference/stability.md).
"""

from __future__ import annotations

import importlib
import json
import re
import typing
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

from .face import FACE, HANDED_OUT, INTERNAL_MEMBERS, ROLES, PublicModule, public_modules
from .markdown import code, table, text

INDEX = "reference/api/index.md"
_ROLE = re.compile(r":(?:py:)?(?P<role>[a-z]+):`(?P<tilde>~?)(?P<target>[\w.]+)(?:\(\))?`")
_LITERAL = re.compile(r"(?<=\S)::$", re.MULTILINE)
_PACKAGES = ("plugins", "tracker_client", "worker")


def _link(from_page: str, to: PublicModule, name: str | None = None) -> str:
    """A relative link from ``from_page`` to ``to``'s page (at ``name``'s heading)."""
    depth = from_page.count("/") - to.page.count("/")
    target = "../" * depth + to.page.rsplit("/", 1)[-1]
    anchor = f"#{to.module}.{name}" if name else ""
    return f"[{code(f'{to.module}.{name}' if name else to.module)}]({target}{anchor})"


def module_page(public: PublicModule) -> str:
    """The reference page of one public module."""
    head = f"# `{public.module}`\n\n{text(public.summary)}\n\n"
    if public.same_as is not None:
        home = public_modules()[public.same_as]
        rows = [[code(name), _link(public.page, home, name)] for name in public.names]
        return (
            head + f"`{public.module}` re-exports these names of "
            f"{_link(public.page, home)}; they are documented there.\n\n"
            + table(["name", "documented at"], rows)
        )
    scope = (
        "Only the names below are public; the module's other names are internal."
        if not public.whole
        else "Every name the module exports is below."
    )
    return (
        head
        + f"{scope} What is public and what the promise is: [stability](../stability.md).\n\n"
        + _directive(public.module, members=False, show_root_heading=False)
        + "".join(
            _directive(f"{public.module}.{name}", **_options(public, name)) for name in public.names
        )
    )


def _options(public: PublicModule, name: str) -> dict[str, object]:
    """What one name's directive changes of the site's options (mkdocs.yml): a class the user
    is handed shows no constructor (it is internal); a data model shows neither its private base
    nor the labels pydantic's fields would get (class-attribute, instance-attribute);
    a constant or a type alias shows its value; a public-looking internal member is left out."""
    options: dict[str, object] = {}
    ident = f"{public.module}.{name}"
    value = getattr(importlib.import_module(public.module), name)
    if not callable(value) or typing.get_origin(value) is not None:
        options["show_attribute_values"] = True  # a constant or an alias: its value is its meaning
    if ident in HANDED_OUT:
        options["merge_init_into_class"] = False
    if ident in INTERNAL_MEMBERS:  # the site's filter, and each internal member by its name
        options["filters"] = ["!^_", *(f"!^{m}$" for m in sorted(INTERNAL_MEMBERS[ident]))]
    if public.role == "data":  # pydantic models: their fields, without base or labels
        options["show_bases"] = False
        options["show_labels"] = False
    return options


def _directive(identifier: str, **options: object) -> str:
    """A mkdocstrings directive rendering ``identifier`` with ``options`` (JSON is YAML)."""
    lines = [f"::: {identifier}\n"]
    if options:
        lines.append("    options:\n")
        lines += [f"      {key}: {json.dumps(value)}\n" for key, value in options.items()]
    return "".join(lines) + "\n"


def index() -> str:
    """The reference index: each role's modules, what they are for, and their names."""
    out = [
        "# Python API\n\n"
        "The public face of backlog-worker: the modules below, and in each only the names its "
        "page lists. Everything else under `worker`, `plugins` and `tracker_client` is internal "
        "and may change in any release without notice; [stability](../stability.md) says what "
        "is promised and how a public name is retired. The pages are generated from the face's "
        "one declaration (`docs/_ref/face.py`), which `tests/test_public_api.py` pins to the "
        "code.\n"
    ]
    for role, title in ROLES.items():
        rows = [[_link(INDEX, m), text(m.summary), _names(m)] for m in FACE if m.role == role]
        out.append(f"\n## {title}\n\n" + table(["module", "what it is for", "names"], rows))
    return "".join(out)


def _names(public: PublicModule) -> str:
    """The module's public names, each a link to its entry (a re-export: to its home's)."""
    home = public_modules()[public.same_as] if public.same_as else public
    return ", ".join(
        f"[{code(name)}]({home.page.rsplit('/', 1)[-1]}#{home.module}.{name})"
        for name in public.names
    )


def pages() -> dict[str, Callable[[], str]]:
    """The index and each public module's page, by path under ``docs/``."""

    def render(public: PublicModule) -> Callable[[], str]:
        return lambda: module_page(public)

    found: dict[str, Callable[[], str]] = {INDEX: index}
    for public in FACE:
        found[public.page] = render(public)
    return found


# -- docstrings: Sphinx roles to Markdown (docs/_ref/griffe_roles.py applies it) ---------------
@cache
def documented() -> dict[int, str]:
    """Each object the reference documents (a public name, and the members its entry shows) by
    identity, and the identifier of its heading."""
    found: dict[int, str] = {}
    for public in FACE:
        if public.same_as is not None:
            continue
        module = importlib.import_module(public.module)
        for name in public.names:
            value = getattr(module, name)
            ident = f"{public.module}.{name}"
            found.setdefault(id(value), ident)
            if isinstance(value, type):
                hidden = INTERNAL_MEMBERS.get(ident, frozenset())
                for member in {*vars(value), *vars(value).get("__annotations__", {})}:
                    if not member.startswith("_") and member not in hidden:
                        attr = getattr(value, member, None)
                        if attr is not None:
                            found.setdefault(id(attr), f"{ident}.{member}")
    return found


def _lookup(path: str) -> Any:
    """The object at dotted ``path`` (a module, or attributes of one), or ``None``."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        with warnings.catch_warnings():  # a deprecated name (tracker_client.Tracker) is looked
            warnings.simplefilter("ignore", DeprecationWarning)  # up, not used
            for attr in parts[cut:]:
                value = getattr(value, attr, None)
                if value is None:
                    return None
        return value
    return None


def reference_of(target: str, scopes: list[str]) -> str | None:
    """The heading identifier of ``target`` as a docstring names it, resolved from each of
    ``scopes`` in turn (its class, its module, the top), or ``None`` when it is internal."""
    for scope in scopes:
        path = f"{scope}.{target}" if scope else target
        if path.startswith(_PACKAGES):
            value = _lookup(path)
            if value is not None and id(value) in documented():
                return documented()[id(value)]
    return None


def markdown_docstring(docstring: str, scopes: list[str]) -> str:
    """``docstring`` with its Sphinx roles as links (a public target: an autorefs link to its
    entry) or code (an internal one: the reference never links into what is internal), and a
    reStructuredText literal block's ``::`` as ``:`` (the indented block stays code)."""

    def replace(match: re.Match[str]) -> str:
        target = match["target"]
        shown = target.rsplit(".", 1)[-1] if match["tilde"] else target
        if match["role"] in {"func", "meth"}:
            shown += "()"
        ident = reference_of(target, scopes)
        return f"[`{shown}`][{ident}]" if ident else f"`{shown}`"

    return _LITERAL.sub(":", _ROLE.sub(replace, docstring))
