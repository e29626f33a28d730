"""The one error tree of tidegate.

Every error tidegate raises on purpose derives from :class:`TidegateError`, so a caller
can catch the whole family in one place. Third-party errors (redis-py, httpx) are
translated at a single boundary each and chained with ``raise ... from exc``::

    TidegateError
    ├── ConfigurationError           (also a ValueError: bad rate, burst, watermarks, URLs)
    ├── BackendError                 (the shared state store misbehaved)
    │   └── BackendUnavailable       (Redis unreachable; the gate fails closed)
    │       └── BackendUnwritable    (Redis answers but refuses writes: OOM, READONLY)
    ├── Throttled                    (the gate will not admit within max_wait)
    ├── DownstreamError              (the system behind the gate answered badly)
    │   ├── DownstreamThrottled      (429 with Retry-After: pause the whole fleet)
    │   ├── DownstreamUnavailable    (503, refused, timed out: transient, back off)
    │   └── DownstreamRejected       (other 4xx: unrecoverable, dead-letter)
    ├── MalformedUnit                (a queued unit lacks what its task needs)
    ├── PayloadTooLarge              (refused at intake, before the broker)
    ├── DeadLettered                 (a unit was moved to the dead-letter queue)
    ├── LoadShed                     (a document was quarantined instead of queued)
    └── EdifactError                 (input is not EDIFACT we can read; see tidegate.edi.errors)

``Throttled`` and the downstream errors carry ``retry_after`` / ``wait_s`` so that code
deciding what to do next never has to parse a message string.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "BackendUnwritable",
    "BrokerUnreachable",
    "ConfigurationError",
    "DeadLettered",
    "DownstreamError",
    "DownstreamRejected",
    "DownstreamThrottled",
    "DownstreamUnavailable",
    "EdifactError",
    "LoadShed",
    "MalformedUnit",
    "PayloadTooLarge",
    "Throttled",
    "TidegateError",
]


class TidegateError(Exception):
    """Root of every error tidegate raises on purpose."""


class ConfigurationError(TidegateError, ValueError):
    """A setting or argument is invalid; the message names the offending value.

    It is also a :class:`ValueError`, so ``RateLimiter(rate=0)`` fails the way any
    Python API fails on a bad argument.
    """


class BackendError(TidegateError):
    """The shared state store (Redis) returned an error we cannot act on."""


class BackendUnavailable(BackendError):
    """The shared state store could not be reached.

    The gate fails closed on this by default: admitting work without the fleet-wide
    count would let every worker send at once, which is the failure tidegate exists
    to prevent.
    """


class BackendUnwritable(BackendUnavailable):
    """Redis is unavailable for writes: memory full under ``noeviction`` (``OOM``), a
    replica after a failover (``READONLY``), or a failed snapshot (``MISCONF``).

    It is a :class:`BackendUnavailable` because the answer is the same — wait and try
    again, never dead-letter: the unit is healthy, the store is not. ``cause`` is
    ``"oom"``, ``"readonly"`` or ``"misconf"``, for a decision that must not parse text.
    """

    def __init__(self, cause: str, operation: str) -> None:
        self.cause = cause
        self.operation = operation
        super().__init__(f"Redis unavailable for writes ({cause}) during {operation}")


class BrokerUnreachable(BackendUnavailable):
    """The task broker (RabbitMQ) named for a run cannot be reached or used.

    The message names the broker's URL with its password redacted.
    """


class Throttled(TidegateError):
    """The gate cannot admit the request within the caller's ``max_wait``.

    Nothing was consumed. ``wait_s`` is how long the caller would have had to wait
    (a lower bound when ``reason`` is ``"concurrency"``: a slot may free earlier).
    """

    def __init__(self, name: str, wait_s: float, *, reason: str = "rate") -> None:
        self.name = name
        self.wait_s = wait_s
        self.reason = reason
        super().__init__(f"gate {name!r} throttled ({reason}): next admission in {wait_s:.3f}s")


class DownstreamError(TidegateError):
    """A downstream call failed; subclasses say whether to wait, retry or give up."""

    #: Whether retrying the same request later can succeed.
    transient: bool = False

    def __init__(self, downstream: str, message: str, *, status: int | None = None) -> None:
        self.downstream = downstream
        self.status = status
        super().__init__(f"{downstream}: {message}")


class DownstreamThrottled(DownstreamError):
    """The downstream said 429; ``retry_after`` seconds is its requested pause."""

    transient = True

    def __init__(self, downstream: str, retry_after: float, *, status: int | None = 429) -> None:
        self.retry_after = retry_after
        super().__init__(downstream, f"throttled, retry after {retry_after:.3f}s", status=status)


class DownstreamUnavailable(DownstreamError):
    """503, connection refused or timeout: transient, retry with backoff.

    ``retry_after`` is the downstream's own hint (a 503's Retry-After), when it gave one.
    """

    transient = True

    def __init__(
        self,
        downstream: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(downstream, message, status=status)


class DownstreamRejected(DownstreamError):
    """The downstream refused the document itself (4xx other than 429): do not retry.

    ``code`` is the downstream's machine-readable reason when it gave one (the
    ``error``/``code`` field of a JSON answer, e.g. ``"unknown_consignee"``): it is what
    an operator needs in the dead-letter reason to fix the document.
    """

    def __init__(
        self, downstream: str, message: str, *, status: int | None = None, code: str | None = None
    ) -> None:
        self.code = code
        super().__init__(
            downstream, message if code is None else f"{message} {code}", status=status
        )


class MalformedUnit(TidegateError):
    """A queued unit lacks what its task needs (an envelope without ``body``…).

    Raised before the gate, so a broken message costs the downstream nothing; it is
    dead-lettered at once with ``problem`` as the reason.
    """

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"unit {key[:32]}: {problem}")


class PayloadTooLarge(TidegateError):
    """A document is larger than the intake takes; it never reaches the broker."""

    def __init__(self, key: str, size: int, limit: int) -> None:
        self.key = key
        self.size = size
        self.limit = limit
        super().__init__(
            f"document {key[:16]} is {size} bytes, above the intake limit of {limit} bytes: "
            "refused before the broker (every worker that fetched a message this size would "
            "hold it in memory); split the interchange or raise max_payload_bytes"
        )


class DeadLettered(TidegateError):
    """A unit was moved to the dead-letter queue with ``reason``; nothing was lost."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"dead-lettered {key}: {reason}")


class LoadShed(TidegateError):
    """A sheddable document was quarantined instead of queued; it will be replayed."""

    def __init__(self, document_class: str, reason: str) -> None:
        self.document_class = document_class
        self.reason = reason
        super().__init__(f"shed {document_class}: {reason}")


class EdifactError(TidegateError):
    """Input that is not EDIFACT tidegate can read; subclasses live in ``tidegate.edi``."""
