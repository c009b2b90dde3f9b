"""The retry policy a task gets when it does not bring its own: bounded, backed off, configurable.

A task created without a retry policy used to retry forever with no delay: one failing executor
ran 2,048 times in 4 s. Now it gets the *default policy*, resolved in layers, each overriding
the fields it names:

1. built in: 5 attempts, exponential backoff from 1 s (jittered), capped at 5 min;
2. the rail: embedded options ``retry_max_attempts``, ``retry_delay_ms``, ``retry_backoff``,
   ``retry_max_delay_ms`` (URL query string, e.g. ``?retry_max_attempts=10``);
3. the pipeline: a ``retry`` object in its definition (same fields without the ``retry_``
   prefix, plus ``dead_letter_stage``), or ``"retry": "unlimited"``.

A task's own policy is taken as NullTickets reads it (its delay and backoff as given, 0 and
constant when omitted), except that an omitted ``max_attempts`` or ``dead_letter_stage`` comes
from the default. Unlimited attempts only when asked for: ``max_attempts`` null (or
``"unlimited"``) in the task's policy, the pipeline's ``retry``, or the rail option.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from tracker_client.bounds import MAX_DURATION_MS
from tracker_client.models import RetryPolicy

__all__ = ["BUILTIN", "UNLIMITED", "RetryDefaults", "given_retry", "parse_retry"]

#: The word that asks for unlimited attempts (``max_attempts`` null means the same).
UNLIMITED = "unlimited"
_BACKOFFS = ("constant", "exponential")
_INT_MAX = 2**63 - 1


class RetryDefaults(NamedTuple):
    """A complete retry policy: what a task without its own gets (``max_attempts`` None =
    unlimited)."""

    max_attempts: int | None = 5
    retry_delay_ms: int = 1_000
    backoff: str = "exponential"
    max_retry_delay_ms: int | None = 300_000
    dead_letter_stage: str | None = None

    def merged(self, overrides: Mapping[str, Any]) -> RetryDefaults:
        """This policy with the fields named in ``overrides`` replaced."""
        return self._replace(**dict(overrides)) if overrides else self

    def describe(self) -> str:
        """One line for messages and ``pipeline show``."""
        attempts = UNLIMITED if self.max_attempts is None else f"{self.max_attempts} attempts"
        delay = f"{self.retry_delay_ms} ms {self.backoff}"
        if self.backoff == "exponential" and self.max_retry_delay_ms is not None:
            delay += f" (cap {self.max_retry_delay_ms} ms)"
        return f"{attempts}, delay {delay}"


#: The built-in default policy.
BUILTIN = RetryDefaults()


def _count(
    value: Any,
    name: str,
    fail: Callable[[str], Exception],
    *,
    nullable: bool,
    high: int = _INT_MAX,
) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, str) and value.strip().lower() == UNLIMITED and nullable:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        extra = f', null or "{UNLIMITED}"' if nullable else ""
        top = "" if high == _INT_MAX else f" and <= {high} (ten years)"
        raise fail(f"{name!r} must be an integer >= 0{top}{extra}, got {value!r}")
    return value


def parse_retry(
    raw: Any,
    where: str,
    fail: Callable[[str], Exception],
    *,
    prefix: str = "",
    allow_stage: bool = True,
) -> dict[str, Any]:
    """Check a partial retry section; returns the :class:`RetryDefaults` fields it overrides.

    ``raw`` is a mapping of (``prefix`` +) field names, or the string ``"unlimited"``. ``fail``
    builds the error to raise from a message (``where`` is prepended); unknown keys are refused.
    """
    if isinstance(raw, str) and raw.strip().lower() == UNLIMITED:
        return {"max_attempts": None}
    if not isinstance(raw, Mapping):
        raise fail(f'{where}: must be an object of retry fields or "{UNLIMITED}"')
    names = {
        f"{prefix}max_attempts": "max_attempts",
        f"{prefix}{'delay_ms' if prefix else 'retry_delay_ms'}": "retry_delay_ms",
        f"{prefix}backoff": "backoff",
        f"{prefix}{'max_delay_ms' if prefix else 'max_retry_delay_ms'}": "max_retry_delay_ms",
    }
    if allow_stage:
        names["dead_letter_stage"] = "dead_letter_stage"
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise fail(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(sorted(names))})"
        )

    def err(message: str) -> Exception:
        return fail(f"{where}: {message}")

    out: dict[str, Any] = {}
    for key, value in raw.items():
        field = names[key]
        if field == "max_attempts":
            out[field] = _count(value, key, err, nullable=True)
        elif field == "retry_delay_ms":
            out[field] = _count(value, key, err, nullable=False, high=MAX_DURATION_MS)
        elif field == "max_retry_delay_ms":
            out[field] = _count(value, key, err, nullable=True, high=MAX_DURATION_MS)
        elif field == "backoff":
            text = value.strip().lower() if isinstance(value, str) else value
            if text not in _BACKOFFS:
                raise err(f"{key!r} must be one of {', '.join(_BACKOFFS)}, got {value!r}")
            out[field] = text
        else:
            if value is not None and (not isinstance(value, str) or not value):
                raise err(f"{key!r} must be a state name or null, got {value!r}")
            out[field] = value
    return out


_DELAY_FIELDS = ("retry_delay_ms", "backoff", "max_retry_delay_ms")


def given_retry(policy: RetryPolicy | None) -> dict[str, Any]:
    """The fields of a task's own retry policy that override the rail's default.

    The default (built in < rail options < the pipeline's ``retry``) fills what the policy
    leaves out; no policy at all is the default whole. The delay is one unit: a policy naming
    any of ``retry_delay_ms``/``backoff``/``max_retry_delay_ms`` gets its delay as NullTickets
    reads it (0 ms, constant, no cap for the ones it omits), so ``{"retry_delay_ms": 5000}`` is
    a constant 5 s. ``max_attempts`` and ``dead_letter_stage`` are inherited one by one.
    """
    if policy is None:
        return {}
    given = {k: getattr(policy, k) for k in policy.model_fields_set}
    if any(k in given for k in _DELAY_FIELDS):
        given.update({k: getattr(policy, k) for k in _DELAY_FIELDS})
    return given
