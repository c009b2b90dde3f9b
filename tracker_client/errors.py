"""The exception tree of backlog-worker.

Every error the project raises on purpose is a :class:`BacklogWorkerError`::

    BacklogWorkerError
    ├── TrackerError                 anything a tracker said or failed to say
    │   ├── TrackerUnavailable       transient: reset, timeout, 5xx, locked database (retryable)
    │   ├── LeaseLost                the lease expired, was revoked, or is unknown (404/410)
    │   ├── Conflict                 409: someone else changed the task, or a terminal task
    │   ├── InvalidTransition        400 invalid_transition: trigger not allowed (lease still held)
    │   ├── NotFound                 404: unknown pipeline, task, run, key, assignment
    │   ├── BacklogFull              429: a role's waiting depth is at its cap
    │   ├── Unsupported              the tracker cannot do this operation
    │   ├── TrackerRejected          any other 4xx; keeps the tracker's ``code``
    │   │   └── ValidationFailed     bad input: pipeline definition, task fields, limits
    │   ├── TrackerCorrupt           the tracker's storage is unusable (foreign/corrupt/newer file)
    │   └── AnswerRefused            an answer broke the client's size or depth limit (hostile?)
    ├── ExecutorError                an executor plugin is missing, misconfigured or broken
    └── ConfigError                  bad configuration; names the key and the file
        └── NoRail                   the embedded rail file named is missing or empty

Foreign exceptions (``httpx``, ``sqlite3``, ``OSError``) are mapped once, at the boundary that
talks to them, with ``raise ... from exc``; nothing above that boundary catches them.

It imports nothing, so every room of every floor may use it.
"""

from __future__ import annotations

__all__ = [
    "AnswerRefused",
    "BacklogFull",
    "BacklogWorkerError",
    "ConfigError",
    "Conflict",
    "ExecutorError",
    "InvalidTransition",
    "LeaseLost",
    "NoRail",
    "NotFound",
    "TokenRefused",
    "TrackerCorrupt",
    "TrackerError",
    "TrackerRejected",
    "TrackerUnavailable",
    "Unsupported",
    "ValidationFailed",
]


class BacklogWorkerError(Exception):
    """Root of every error backlog-worker raises on purpose."""


class TrackerError(BacklogWorkerError):
    """A tracker refused a request or could not be reached.

    ``code`` is the NullTickets ``error.code`` (``"not_found"``, ``"expired"``, ...) when known.
    """

    #: Default error code for this class; instances may carry the tracker's own.
    default_code = "tracker_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code

    def __str__(self) -> str:
        return self.message


class TrackerUnavailable(TrackerError):
    """Transient failure: the only error worth retrying (reset, timeout, 5xx, busy database)."""

    default_code = "unavailable"


class LeaseLost(TrackerError):
    """The lease is gone (expired, revoked by cancel, or finished): stop work, write nothing."""

    default_code = "lease_lost"


class Conflict(TrackerError):
    """409: the task changed under us (stage/version mismatch, duplicate, terminal task)."""

    default_code = "conflict"


class InvalidTransition(TrackerError):
    """The trigger is not allowed from the task's stage. The lease is still held.

    ``allowed`` lists the triggers that are allowed from that stage, when known.
    """

    default_code = "invalid_transition"

    def __init__(
        self, message: str, *, code: str | None = None, allowed: list[str] | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.allowed = list(allowed or [])


class NotFound(TrackerError):
    """404: the pipeline, task, run, key or assignment does not exist."""

    default_code = "not_found"


class BacklogFull(TrackerError):
    """A role's backlog is at its cap; nothing was written.

    Carries ``role``, ``depth`` (waiting tasks now) and ``cap``.
    """

    default_code = "backlog_full"

    def __init__(
        self,
        message: str,
        *,
        role: str,
        depth: int,
        cap: int,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.role = role
        self.depth = depth
        self.cap = cap
        self.retry_after_s = retry_after_s


class Unsupported(TrackerError):
    """The tracker cannot perform this operation (e.g. ``cancel`` on a NullTickets server)."""

    default_code = "unsupported"


class TrackerRejected(TrackerError):
    """Any other refusal (4xx); ``code`` keeps the tracker's own error code."""

    default_code = "rejected"


class TokenRefused(TrackerRejected):
    """The tracker refused the api token (401/403 on an admin route), or none was sent.

    ``status`` is the HTTP status and ``detail`` the request and the tracker's own words, so a
    command can say which token it sent (it knows where the token came from; the client not).
    """

    default_code = "unauthorized"

    def __init__(
        self, message: str, *, code: str | None = None, status: int = 401, detail: str = ""
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.detail = detail or message


class ValidationFailed(TrackerRejected):
    """Bad input: the message names the field or rule that is wrong."""

    default_code = "validation_failed"


class TrackerCorrupt(TrackerError):
    """The tracker's storage cannot be used: not a backlog database, corrupt, or too new."""

    default_code = "corrupt"


class AnswerRefused(TrackerError):
    """The tracker's answer broke a limit the client reads answers with: larger than its byte
    limit (``answer_too_large``) or nested deeper than its depth limit (``answer_too_deep``).
    A broken or hostile server: that one call fails (not retried: the same server would answer
    the same), the worker goes on. The message names the limit (docs/operate/security.md)."""

    default_code = "answer_refused"


class ExecutorError(BacklogWorkerError):
    """An executor plugin is missing, misconfigured, or broke its contract."""


class ConfigError(BacklogWorkerError):
    """Bad configuration. The message names the key (and the file, when there is one)."""


class NoRail(ConfigError):
    """The embedded rail file named does not exist (or is empty): only ``pipeline create``
    starts a new rail, so every other command says ``no rail at PATH`` instead of creating one."""
