"""Replaying dead letters: FIFO, bounded, paced — a replay must not become a storm.

A replay republishes each record's task with its original arguments (so its
idempotency key is unchanged). Before publishing, it marks the record "in replay"
(:meth:`~tidegate.load.dlq.DeadLetterQueue.begin_replay`, atomic with the check), so a
second replay — started by another operator, or by the same one pressing enter twice
— skips the letters already in flight, says how many it skipped, and goes on to the
later ones instead of publishing the oldest again. The record is removed only when the
replayed unit is delivered; a unit that fails again rewrites its record
(``attempts`` + 1), which ends the mark: it is never lost and never loops on its own —
every replay is an operator's (or a schedule's) decision, bounded by ``limit``. A
unit lost on the way (a broker flushed, a worker killed without redelivery) holds its
mark only until ``hold_s`` has passed. Publishing is paced by a fleet-wide rate limit,
and the replayed tasks go through their downstream's gate like any other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from tidegate.errors import ConfigurationError
from tidegate.events import LetterReplayed, LetterReplaySkipped, emit
from tidegate.flow import RateLimiter
from tidegate.load.dlq import DEFAULT_REPLAY_HOLD_S, DeadLetter, ReplayMark
from tidegate.load.protocols.dlq import DeadLetterStore
from tidegate.logging import get_logger, key_hash

__all__ = ["DEFAULT_REPLAY_LIMIT", "ReplayResult", "replay_dead_letters"]

log = get_logger("tidegate.load")

#: Records replayed per run unless asked otherwise.
DEFAULT_REPLAY_LIMIT = 100


@dataclass
class ReplayResult:
    """What one replay run did.

    Attributes:
        published: records republished by this run.
        keys: their idempotency keys, oldest first.
        skipped: matching records passed over because another replay holds them.
    """

    published: int = 0
    keys: list[str] = field(default_factory=list)
    skipped: int = 0


def replay_dead_letters(
    dlq: DeadLetterStore,
    publish: Callable[[DeadLetter], None],
    *,
    limit: int = DEFAULT_REPLAY_LIMIT,
    reason: str | None = None,
    batch_id: str | None = None,
    pace: RateLimiter | None = None,
    hold_s: float = DEFAULT_REPLAY_HOLD_S,
) -> ReplayResult:
    """Republish up to ``limit`` records not already in replay, oldest first.

    Args:
        dlq: where the records are (Redis, or its memory twin).
        publish: sends one record's task back to its queue (the integration's job). It
            gets the record as it was before this replay, so ``letter.replays + 1`` is
            this replay's number. If it raises, the mark is undone and the error
            propagates: nothing is left marked that was not published.
        limit: most records this run publishes (>= 1); skipped ones do not count.
        reason: only records whose reason contains this (case-insensitive).
        batch_id: only records of this batch.
        pace: a rate limit on publishing (fleet-wide when Redis-backed).
        hold_s: how long a record stays in replay if its unit never settles.

    Raises:
        ConfigurationError: ``limit`` < 1 or ``hold_s`` not > 0.
    """
    if limit < 1:
        raise ConfigurationError(f"limit must be >= 1, got {limit!r}")
    if not (math.isfinite(hold_s) and hold_s > 0):
        raise ConfigurationError(f"hold_s must be a finite number > 0, got {hold_s!r}")
    result = ReplayResult()
    for letter in dlq.iter(reason=reason, batch_id=batch_id):
        if result.published >= limit:
            break
        # A letter read as held is skipped without asking again; one read as free is
        # taken only through the atomic mark, which has the last word.
        mark = (
            ReplayMark("in_replay", letter.in_replay_until, letter.replays)
            if letter.in_replay_until is not None
            else dlq.begin_replay(letter.key, hold_s=hold_s)
        )
        if not mark.taken:
            if mark.status == "in_replay":
                result.skipped += 1
                emit(LetterReplaySkipped(key_hash(letter.key), letter.task, mark.in_replay_until))
            continue
        try:
            if pace is not None:
                pace.acquire(max_wait=3600)
            publish(letter)
        except BaseException:
            dlq.cancel_replay(letter.key)
            raise
        result.published += 1
        result.keys.append(letter.key)
        emit(
            LetterReplayed(
                key_hash(letter.key),
                letter.task,
                letter.reason,
                letter.attempts,
                mark.replays,
                mark.in_replay_until,
                letter.batch_id,
            )
        )
    log.info(
        "dlq_replay_finished",
        published=result.published,
        skipped_in_replay=result.skipped,
        limit=limit,
    )
    return result
