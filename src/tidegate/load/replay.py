"""Replaying dead letters: FIFO, bounded, paced — a replay must not become a storm.

A replay republishes each record's task with its original arguments (so its
idempotency key is unchanged) and marks the record as being replayed; the record is
removed only when the replayed unit is delivered. A unit that fails again simply
updates its record (``attempts`` + 1): it is never lost and never loops on its own —
every replay is an operator's (or a schedule's) decision, bounded by ``limit``.
Publishing is paced by a fleet-wide rate limit, and the replayed tasks go through
their downstream's gate like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tidegate.flow import RateLimiter
from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.logging import get_logger

__all__ = ["DEFAULT_REPLAY_LIMIT", "ReplayResult", "replay_dead_letters"]

log = get_logger("tidegate.load")

#: Records replayed per run unless asked otherwise.
DEFAULT_REPLAY_LIMIT = 100


@dataclass
class ReplayResult:
    """What one replay run did."""

    published: int = 0
    keys: list[str] = field(default_factory=list)


def replay_dead_letters(
    dlq: DeadLetterQueue,
    publish: Callable[[DeadLetter], None],
    *,
    limit: int = DEFAULT_REPLAY_LIMIT,
    reason: str | None = None,
    batch_id: str | None = None,
    pace: RateLimiter | None = None,
) -> ReplayResult:
    """Republish up to ``limit`` records, oldest first, optionally filtered.

    Args:
        dlq: where the records are.
        publish: sends one record's task back to its queue (the integration's job).
        limit: most records this run (>= 1).
        reason: only records whose reason contains this (case-insensitive).
        batch_id: only records of this batch.
        pace: a rate limit on publishing (fleet-wide when Redis-backed).
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit!r}")
    result = ReplayResult()
    for letter in list(dlq.iter(reason=reason, batch_id=batch_id, limit=limit)):
        if pace is not None:
            pace.acquire(max_wait=3600)
        publish(letter)
        marked = dlq.mark_replayed(letter.key)
        result.published += 1
        result.keys.append(letter.key)
        log.info(
            "dlq_item_replayed",
            key=letter.key,
            task=letter.task,
            reason=letter.reason,
            attempts=letter.attempts,
            replays=marked.replays if marked else letter.replays + 1,
            bl_number=letter.bl_number,
            batch_id=letter.batch_id,
        )
    return result
