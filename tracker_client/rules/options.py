"""Options of ``EmbeddedTracker.open``: coerced from URL query strings, checked, named on error."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tracker_client.errors import ConfigError
from tracker_client.rules.common import Options
from tracker_client.rules.retrypolicy import BUILTIN, parse_retry

__all__ = ["parse_options"]

_SYNC = ("OFF", "NORMAL", "FULL", "EXTRA")
#: The rail's default retry policy (see :mod:`.retrypolicy`).
_RETRY = ("retry_max_attempts", "retry_delay_ms", "retry_backoff", "retry_max_delay_ms")


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"embedded tracker option {name}: expected an integer, got {value!r}")
    try:
        n = int(value.strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"embedded tracker option {name}: expected an integer, got {value!r}"
        ) from None
    if isinstance(value, float) and value != n:
        raise ConfigError(f"embedded tracker option {name}: expected an integer, got {value!r}")
    if n < low:
        raise ConfigError(f"embedded tracker option {name}: must be >= {low}, got {n}")
    return n


def _float(name: str, value: Any) -> float:
    try:
        x = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"embedded tracker option {name}: expected a number, got {value!r}"
        ) from None
    if not x > 0 or x != x or x == float("inf"):
        raise ConfigError(
            f"embedded tracker option {name}: must be a positive number, got {value!r}"
        )
    return x


def _caps(value: Any) -> dict[str, int]:
    name = "role_backlog_depth"
    if value is None:
        return {}
    raw: Any = value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                raw = json.loads(text)
            except ValueError as exc:
                raise ConfigError(f"embedded tracker option {name}: bad JSON ({exc})") from exc
        else:
            raw = {}
            for part in filter(None, (p.strip() for p in text.split(","))):
                role, sep, cap = part.replace(":", "=", 1).partition("=")
                if not sep or not role.strip():
                    raise ConfigError(
                        f"embedded tracker option {name}: expected role=cap[,role=cap...], "
                        f"got {part!r}"
                    )
                raw[role.strip()] = cap
    if not isinstance(raw, Mapping):
        raise ConfigError(f"embedded tracker option {name}: expected a mapping role -> cap")
    return {str(k): _int(f"{name}[{k}]", v, 0) for k, v in raw.items()}


#: The longest retention accepted (100 years): more is a typo; 0 already means forever.
_MAX_RETENTION_DAYS = 36_600


def _retention(value: Any) -> int:
    days = _int("retention_days", value, 0)
    if days > _MAX_RETENTION_DAYS:
        raise ConfigError(
            f"embedded tracker option retention_days: at most {_MAX_RETENTION_DAYS} "
            f"(0 keeps finished tasks forever), got {days}"
        )
    return days


def _on_off(name: str, value: Any) -> bool:
    """``on``/``off`` (a URL's text) or a bool (a keyword option)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("on", "off"):
        raise ConfigError(f"embedded tracker option {name}: expected on or off, got {value!r}")
    return text == "on"


def parse_options(options: Mapping[str, Any]) -> Options:
    """Build :class:`Options` from keyword/URL options; ``ConfigError`` names what is wrong."""
    known = {
        "synchronous",
        "busy_timeout_ms",
        "max_backlog_depth",
        "role_backlog_depth",
        "max_stale_attempts",
        "idempotency_ttl_s",
        "poll_interval_s",
        "retention_days",
        "claim_ahead",
        *_RETRY,
    }
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"unknown embedded tracker option(s): {', '.join(unknown)} "
            f"(known: clock, {', '.join(sorted(known))})"
        )
    sync = str(options.get("synchronous", "NORMAL")).strip().upper()
    if sync not in _SYNC:
        raise ConfigError(
            f"embedded tracker option synchronous: expected one of {', '.join(_SYNC)}, "
            f"got {options.get('synchronous')!r}"
        )
    return Options(
        synchronous=sync,
        busy_timeout_ms=_int("busy_timeout_ms", options.get("busy_timeout_ms", 5000), 0),
        max_backlog_depth=_int("max_backlog_depth", options.get("max_backlog_depth", 100_000), 0),
        role_backlog_depth=_caps(options.get("role_backlog_depth")),
        max_stale_attempts=_int("max_stale_attempts", options.get("max_stale_attempts", 3), 0),
        idempotency_ttl_s=_int("idempotency_ttl_s", options.get("idempotency_ttl_s", 86_400), 0),
        poll_interval_s=_float("poll_interval_s", options.get("poll_interval_s", 0.05)),
        retention_days=_retention(options.get("retention_days", 30)),
        claim_ahead=_on_off("claim_ahead", options.get("claim_ahead", "on")),
        retry=BUILTIN.merged(
            parse_retry(
                {k: v for k, v in options.items() if k in _RETRY},
                "embedded tracker option",
                ConfigError,
                prefix="retry_",
                allow_stage=False,
            )
        ),
    )
