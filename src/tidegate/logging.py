"""Structured JSON logging: one event per decision, never a payload.

``configure()`` is called once by every entry point (CLI, worker, demo). Library code
does ``log = get_logger(__name__)`` and ``log.warning("gate_lease_lost", downstream=...)``
for start-up, error and diagnostic lines; a *decision* (throttle, pause, park, dead
letter, shed, replay, scale signal, rate change) is a typed event instead
(:mod:`tidegate.events`), which this logger renders as one line among its subscribers.
Either way the event name and keys are the stable contract that dashboards and alerts
are built on, so they are snake_case and never renamed lightly.

The :class:`RedactSensitive` processor is the safety net under the rule "never log a
payload, a raw segment or a personal field": any key on its deny list is replaced by
``"[redacted]"`` before rendering, whatever a caller passed.

A unit's idempotency key can itself be a business identifier (the TOS forward is
keyed on the B/L number), so events about a unit carry :func:`key_hash` of it as
``key_hash``, never the key.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog

__all__ = ["SENSITIVE_KEYS", "RedactSensitive", "configure", "get_logger", "key_hash"]

#: Keys that must never reach a log line with their value: payloads, raw EDIFACT,
#: personal data (NAD party names and addresses), business identifiers (B/L,
#: consignment and container numbers, raw idempotency keys) and credentials.
SENSITIVE_KEYS: frozenset[str] = frozenset(
    {
        "payload",
        "body",
        "raw",
        "raw_text",
        "segment",
        "segments",
        "text",
        "document",
        "party_name",
        "name_and_address",
        "address",
        "bl_number",
        "consignment_number",
        "container_number",
        "containers",
        "idempotency_key",
        "password",
        "secret",
        "token",
        "authorization",
        "redis_url",
        "url_with_credentials",
    }
)

_REDACTED = "[redacted]"
#: Hex digits of SHA-256 kept by :func:`key_hash`: 64 bits, no collisions in practice.
_KEY_HASH_DIGITS = 16


def key_hash(key: str) -> str:
    """A unit key's stand-in on a log line: the first 16 hex digits of its SHA-256.

    The same key always gives the same hash, so an operator can still follow one unit
    through the log and match it to its record (hash the key from ``tidegate dlq``),
    while the identifier itself stays out of the log store. Warning: a B/L number is
    guessable, so this is a pseudonym against casual reading, not anonymisation.
    """
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:_KEY_HASH_DIGITS]


class RedactSensitive:
    """Replace the value of every sensitive key with ``"[redacted]"``.

    Args:
        keys: the deny list; defaults to :data:`SENSITIVE_KEYS`.
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: Iterable[str] = SENSITIVE_KEYS) -> None:
        self._keys = frozenset(keys)

    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key in self._keys.intersection(event_dict):
            event_dict[key] = _REDACTED
        return event_dict


def configure(*, level: str = "INFO", stream: TextIO | None = None, json: bool = True) -> None:
    """Configure structlog for JSON lines on ``stream`` (default stderr).

    Args:
        level: minimum level name (``DEBUG``, ``INFO``...).
        stream: where lines go; tests pass a ``StringIO``.
        json: ``False`` renders for a human at a terminal (the demo's own output is
            rich, so its log lines stay JSON by default and go to a file).
    """
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            RedactSensitive(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(stream if stream is not None else sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str | None = None) -> Any:
    """Return a lazy structlog logger carrying ``component=name``.

    Lazy, so that ``configure()`` (or ``structlog.testing.capture_logs()``) called after
    import still applies to module-level loggers.
    """
    return structlog.get_logger(component=name) if name else structlog.get_logger()
