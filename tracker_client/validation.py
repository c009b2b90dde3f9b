"""One way to turn a pydantic :class:`~pydantic.ValidationError` into the words a person reads.

Every layer validates with pydantic (the configuration, operator input, stored rows, request
bodies, tracker answers, executor options) and every layer reports a refusal the same way: the
field path named (``worker.concurrency``, ``retry_policy.max_attempts``), then the problem
(pydantic's own text without its ``Value error,`` prefix, or a validator's sentence). An unknown
key can name the closest known one when the validated model is given.

This is the lowest layer: it imports only pydantic, so the worker, the trackers and the plugins
can all use it. It never puts an input value in a message (a value may be a token); the callers
choose the prefix (a file, a variable, an executor) and the wording of their own sentences.

- :func:`problems`: the errors as :class:`Problem` objects (path, message, kind).
- :func:`describe_validation`: ``path: problem; path: problem`` (or only the first).
- :func:`describe_options`: an executor's options, ``command option 'argv' must be ...``.
- :func:`must`: an ``Annotated`` marker that replaces pydantic's type errors for one field by a
  sentence of the caller's (``must be a non-empty list of strings``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError

__all__ = [
    "Loc",
    "Problem",
    "describe_options",
    "describe_validation",
    "dotted",
    "model_at",
    "must",
    "problems",
]

#: A field path as pydantic gives it: keys and list indexes.
Loc = tuple[str | int, ...]

#: The pydantic error type of a key the model does not have (``extra="forbid"``).
_UNKNOWN = "extra_forbidden"
#: The error type :func:`must` raises: its message is the caller's whole sentence.
_MUST = "must"
#: Problems phrased as a predicate continue their subject's sentence (``option 'x' must ...``);
#: any other text follows a colon (``option 'x': Input should be ...``).
_PREDICATES = ("must ", "is ", "needs ")


@dataclass(frozen=True, slots=True)
class Problem:
    """One refusal: where (``loc``), what (``message``) and pydantic's error ``kind``."""

    loc: Loc
    message: str
    kind: str

    @property
    def unknown_key(self) -> bool:
        """True for a key the model does not have (``extra="forbid"``)."""
        return self.kind == _UNKNOWN

    def place(self, empty: str = "value") -> str:
        """The dotted path (``roles.0.name``); ``empty`` names the whole value."""
        return dotted(self.loc, empty)


def dotted(loc: Loc, empty: str = "value") -> str:
    """``loc`` as ``a.b.0``, or ``empty`` for the root."""
    return ".".join(str(p) for p in loc) or empty


def _field_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds directly or as list items (None for anything else)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (list, tuple):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            return args[0]
    return None


def model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model whose fields are valid at ``loc`` (None inside free-form tables)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list of models: its type was taken at the list
        if model is None:
            return None
        info = model.model_fields.get(part)
        if info is None:
            return None
        model = _field_model(info.annotation)
    return model


def _closest(loc: Loc, root: type[BaseModel] | None) -> str | None:
    if root is None or not loc:
        return None
    model = model_at(root, loc[:-1])
    if model is None:
        return None
    import difflib  # an error's path only (issue 31, memory)

    match = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return match[0] if match else None


def problems(exc: ValidationError, root: type[BaseModel] | None = None) -> list[Problem]:
    """The errors of ``exc``, in pydantic's order.

    An unknown key's message is ``unknown key`` (``unknown key (did you mean 'x'?)`` when
    ``root``, the validated model, has a close one); every other message is pydantic's (or the
    validator's) without the ``Value error, `` prefix.
    """
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc: Loc = tuple(err["loc"])
        kind = str(err["type"])
        message = str(err["msg"]).removeprefix("Value error, ")
        if kind == _UNKNOWN:
            near = _closest(loc, root)
            message = f"unknown key (did you mean {near!r}?)" if near else "unknown key"
        out.append(Problem(loc, message, kind))
    return out


def describe_validation(
    exc: ValidationError,
    *,
    root: type[BaseModel] | None = None,
    place: Callable[[Problem], str] | None = None,
    empty: str = "value",
    first_only: bool = False,
) -> str:
    """``path: problem; path: problem`` for a person (``first_only``: the first error alone).

    ``place`` renders one problem with its own prefix (the configuration names the file, the
    variable or the flag that set the key); by default ``dotted(loc): message``, with ``empty``
    naming the root. ``root`` lets an unknown key suggest the closest known one.
    """
    found = problems(exc, root)
    if first_only:
        found = found[:1]
    if place is None:
        return "; ".join(f"{p.place(empty)}: {p.message}" for p in found)
    return "; ".join(place(p) for p in found)


def describe_options(
    exc: ValidationError,
    model: type[BaseModel],
    *,
    label: str = "option",
    unknown_label: str | None = None,
) -> str:
    """An executor's refused options: ``unknown <label> 'x' (known: ...)``, then per option
    ``<label> 'name' must ...`` (a predicate sentence) or ``<label> 'name': problem``.

    ``label`` names the options (``command option``); ``unknown_label`` the unknown ones (default
    ``label``). A problem of the whole table (a model validator) is its sentence alone.
    """
    found = problems(exc)
    parts: list[str] = []
    unknown = [p for p in found if p.unknown_key]
    if unknown:
        names = ", ".join(repr(dotted(p.loc)) for p in unknown)
        known = ", ".join(model.model_fields)
        parts.append(f"unknown {unknown_label or label} {names} (known: {known})")
    for p in found:
        if p.unknown_key:
            continue
        if not p.loc:
            parts.append(p.message)
            continue
        name = _option_name(p.loc)
        sep = " " if p.message.startswith(_PREDICATES) else ": "
        parts.append(f"{label} {name!r}{sep}{p.message}")
    return "; ".join(parts)


def _option_name(loc: Loc) -> str:
    """``argv[0]``, ``env.A``: an option and the place inside it."""
    out = str(loc[0])
    for part in loc[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def must(sentence: str) -> WrapValidator:
    """An ``Annotated`` marker: any refusal of this field reads ``sentence`` instead.

    For options whose documented message is a sentence of its own (``must be a table of
    strings``) rather than pydantic's per-item text. The sentence names no value.
    """

    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError(_MUST, sentence) from None

    return WrapValidator(check)
