"""Reading a finished ``nullclaw agent`` run: success, or a failure with the right code.

The rules (how the NullClaw CLI reports its outcome):

* success only when rc == 0 **and** stdout starts with ``Sending to ``; the answer is stdout
  without that header line (and without a ``Session: <id>`` line right after it);
* rc 0 with empty stdout is a configuration error (``nullclaw_config_error``, not retryable),
  reported with its stderr lines;
* rc 0 with other stdout (slash-command output, the REPL banner) is ``nullclaw_unexpected_output``;
* rc 1 names the final ``error: <Name>`` of stderr; retryable only for provider errors;
  ``panic: ...`` is ``nullclaw_panic``;
* death by a signal names the signal (``nullclaw_killed``, retryable).

Output is decoded as UTF-8 with replacement characters, so no byte sequence can crash this.

Pure: it may touch a finished run's bytes and the plugin API's outcome types only; no process, no
file.
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from plugins.api import Failure

__all__ = [
    "HEADER_PREFIX",
    "Answer",
    "classify",
    "decode",
    "find_verdict",
    "signal_name",
    "split_answer",
    "stderr_lines",
]

HEADER_PREFIX = b"Sending to "
_SESSION_PREFIX = b"Session: "
_ERROR_LINE = re.compile(r"^error: ([A-Za-z0-9_.]+)\s*$")
_PANIC_LINE = re.compile(r"^panic: (.*)$")
#: stderr lines kept in failure details (the tail, where nullclaw puts the reason).
STDERR_TAIL_LINES = 40


def decode(data: bytes) -> str:
    """UTF-8 with replacement characters: executor output never raises on decoding."""
    return data.decode("utf-8", "replace")


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, ``signal 99`` for a number Python does not know."""
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def stderr_lines(stderr: bytes, *, limit: int = STDERR_TAIL_LINES) -> list[str]:
    """The last ``limit`` non-empty stderr lines, decoded."""
    lines = [ln.rstrip() for ln in decode(stderr).splitlines() if ln.strip()]
    return lines[-limit:]


@dataclass(frozen=True, slots=True)
class Answer:
    """The agent's answer: ``text`` without header lines; ``decoding_errors`` if bytes were bad."""

    text: str
    raw_size: int
    decoding_errors: bool
    header: list[str] = field(default_factory=list)


def split_answer(stdout: bytes) -> Answer:
    """Strip the ``Sending to ...`` header (and ``Session:`` line) and the final newline."""
    header: list[str] = []
    rest = stdout
    if rest.startswith(HEADER_PREFIX):
        line, _, rest = rest.partition(b"\n")
        header.append(decode(line).rstrip("\r"))
        if rest.startswith(_SESSION_PREFIX):
            line, _, rest = rest.partition(b"\n")
            header.append(decode(line).rstrip("\r"))
    if rest.endswith(b"\n"):
        rest = rest[:-1]
    text = decode(rest)
    try:
        rest.decode("utf-8")
        bad = False
    except UnicodeDecodeError:
        bad = True
    return Answer(text=text, raw_size=len(rest), decoding_errors=bad, header=header)


def _error_name(lines: Iterable[str]) -> tuple[str | None, str | None]:
    name: str | None = None
    panic: str | None = None
    for line in lines:
        m = _ERROR_LINE.match(line.strip())
        if m:
            name = m.group(1)
        p = _PANIC_LINE.match(line.strip())
        if p:
            panic = p.group(1)
    return name, panic


def classify(
    *,
    returncode: int | None,
    signum: int | None,
    stdout: bytes,
    stderr: bytes,
    retryable_errors: Iterable[str],
) -> Failure | Answer:
    """Turn a finished run into its :class:`Answer` or the :class:`Failure` to report."""
    tail = stderr_lines(stderr)
    if signum is not None:
        sig = signal_name(signum)
        return Failure(
            reason="nullclaw_killed",
            message=f"nullclaw was killed by {sig}",
            retryable=True,
            details={"signal": sig, "stderr_tail": tail},
        )
    details: dict[str, Any] = {"returncode": returncode, "stderr_tail": tail}
    if returncode == 0:
        if not stdout.strip():
            shown = "; ".join(tail) if tail else "(stderr was empty)"
            return Failure(
                reason="nullclaw_config_error",
                message=f"nullclaw exited 0 without an answer (configuration error): {shown}",
                retryable=False,
                details={**details, "stderr": tail},
            )
        if not stdout.startswith(HEADER_PREFIX):
            head = decode(stdout[:300]).strip()
            return Failure(
                reason="nullclaw_unexpected_output",
                message=(
                    "nullclaw exited 0 but stdout does not start with 'Sending to ' "
                    f"(a slash command or the interactive REPL?): {head!r}"
                ),
                retryable=False,
                details={**details, "stdout_head": head},
            )
        return split_answer(stdout)
    name, panic = _error_name(tail)
    if panic is not None:
        return Failure(
            reason="nullclaw_panic",
            message=f"nullclaw panicked (rc {returncode}): {panic}",
            retryable=False,
            details={**details, "panic": panic},
        )
    if name is not None:
        retryable = name in set(retryable_errors)
        return Failure(
            reason="nullclaw_provider_error" if retryable else "nullclaw_error",
            message=f"nullclaw failed (rc {returncode}): error: {name}",
            retryable=retryable,
            details={**details, "error": name},
        )
    last = tail[-1] if tail else "(stderr was empty)"
    return Failure(
        reason="nullclaw_error",
        message=f"nullclaw failed (rc {returncode}): {last}",
        retryable=False,
        details=details,
    )


def find_verdict(answer: str, triggers: dict[str, str]) -> tuple[str, str] | None:
    """The last answer line that is exactly a verdict word (case, markup and punctuation
    around it ignored), as ``(word, trigger)``; None when no line is.
    """
    by_word = {w.strip().casefold(): (w, t) for w, t in triggers.items()}
    for line in reversed(answer.splitlines()):
        core = re.sub(r"^[\W_]+|[\W_]+$", "", line.strip()).casefold()
        if not core:
            continue
        core = re.sub(r"^(verdict|decision)\s*[:=-]\s*[\W_]*", "", core)
        if core in by_word:
            return by_word[core]
    return None
