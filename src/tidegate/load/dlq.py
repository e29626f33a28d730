"""The dead-letter queue: where a unit goes when it cannot be delivered, with the reason.

Celery on Redis has no DLQ (Celery #3261, #4797); a failed task is a log line and a
result nobody reads. Here every unrecoverable unit — a downstream that refuses the
document, retries exhausted, a consignment without a B/L — becomes one durable record
with everything needed to understand it and to replay it. Records are keyed by the
unit's idempotency key, so a unit dead-lettered twice is one record with ``attempts``
counting up, never two. Retention is explicit: :meth:`expire` removes old records and
*reports how many* (``dlq_records_expired``); nothing vanishes silently.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import redis

from tidegate._redis import map_redis_errors
from tidegate.flow.backends.base import DEFAULT_PREFIX
from tidegate.logging import get_logger

__all__ = ["DeadLetter", "DeadLetterQueue"]

log = get_logger("tidegate.load")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered unit.

    Attributes:
        key: the unit's idempotency key (the record's identity).
        task: the task (or step) that gave up.
        reason: a short, precise, human-readable reason (never payload text).
        exception: the exception class name, or ``""``.
        attempts: how many times delivery was attempted.
        payload: what a replay needs (task arguments); never logged.
        bl_number: the Bill of Lading, when the unit is one.
        batch_id: the manifest batch the unit belongs to.
        first_failed_at / last_failed_at: Unix seconds.
        replays: how many times the unit was replayed from the DLQ.
    """

    key: str
    task: str
    reason: str
    exception: str = ""
    attempts: int = 1
    payload: dict[str, Any] = field(default_factory=dict)
    bl_number: str | None = None
    batch_id: str | None = None
    first_failed_at: float = 0.0
    last_failed_at: float = 0.0
    replays: int = 0

    def summary(self) -> dict[str, Any]:
        """The record without its payload, for listings and logs."""
        data = asdict(self)
        del data["payload"]
        return data


class DeadLetterQueue:
    """Durable dead letters in Redis, FIFO by first failure.

    Args:
        client: a sync Redis client.
        prefix: key prefix; keys share the ``{dlq}`` hash tag.
    """

    def __init__(self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = client
        base = f"{prefix}:{{dlq}}"
        self._records, self._order, self._stats = (
            f"{base}:records",
            f"{base}:order",
            f"{base}:stats",
        )

    def add(self, letter: DeadLetter) -> DeadLetter:
        """Record ``letter``; a key already in the DLQ keeps its first failure time."""
        now = time.time()
        with map_redis_errors("dead-letter"):
            previous = self.get(letter.key)
            first = previous.first_failed_at if previous else (letter.first_failed_at or now)
            attempts = max(letter.attempts, previous.attempts + 1 if previous else 1)
            replays = max(letter.replays, previous.replays if previous else 0)
            stored = DeadLetter(
                **{
                    **asdict(letter),
                    "first_failed_at": first,
                    "last_failed_at": now,
                    "attempts": attempts,
                    "replays": replays,
                }
            )
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(self._records, letter.key, json.dumps(asdict(stored)))
            pipe.zadd(self._order, {letter.key: first}, nx=True)
            pipe.hincrby(self._stats, "dead_lettered_total", 1)
            pipe.execute()
        log.warning(
            "bl_dead_lettered" if stored.bl_number is not None else "task_dead_lettered",
            key=stored.key,
            task=stored.task,
            reason=stored.reason,
            exception=stored.exception,
            attempts=stored.attempts,
            bl_number=stored.bl_number,
            batch_id=stored.batch_id,
        )
        return stored

    def get(self, key: str) -> DeadLetter | None:
        with map_redis_errors("dlq get"):
            raw = self.client.hget(self._records, key)
        return DeadLetter(**json.loads(raw)) if raw else None

    def __len__(self) -> int:
        with map_redis_errors("dlq count"):
            return int(self.client.zcard(self._order))

    def iter(
        self, *, reason: str | None = None, batch_id: str | None = None, limit: int | None = None
    ) -> Iterator[DeadLetter]:
        """Records oldest first, filtered by a reason substring and/or batch id."""
        yielded = 0
        for start in range(0, len(self), 500):
            with map_redis_errors("dlq list"):
                keys = cast("list[bytes]", self.client.zrange(self._order, start, start + 499))
                raws = self.client.hmget(self._records, keys) if keys else []
            for raw in raws:
                if raw is None:
                    continue
                letter = DeadLetter(**json.loads(raw))
                if reason and reason.lower() not in letter.reason.lower():
                    continue
                if batch_id and letter.batch_id != batch_id:
                    continue
                yield letter
                yielded += 1
                if limit is not None and yielded >= limit:
                    return

    def mark_replayed(self, key: str) -> DeadLetter | None:
        """Count one more replay of ``key``; the record stays until the unit is delivered."""
        letter = self.get(key)
        if letter is None:
            return None
        updated = DeadLetter(**{**asdict(letter), "replays": letter.replays + 1})
        with map_redis_errors("dlq mark replayed"):
            self.client.hset(self._records, key, json.dumps(asdict(updated)))
        return updated

    def remove(self, key: str) -> bool:
        """Delete one record (after a successful replay)."""
        with map_redis_errors("dlq remove"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hdel(self._records, key)
            pipe.zrem(self._order, key)
            removed, _ = pipe.execute()
        return bool(removed)

    def purge(self) -> int:
        """Delete every record; returns how many there were."""
        count = len(self)
        with map_redis_errors("dlq purge"):
            self.client.delete(self._records, self._order)
        log.warning("dlq_purged", records=count)
        return count

    def expire(self, *, older_than_s: float) -> int:
        """Remove records first failed more than ``older_than_s`` ago; report the count."""
        cutoff = time.time() - older_than_s
        with map_redis_errors("dlq expire"):
            keys = self.client.zrangebyscore(self._order, "-inf", cutoff)
            if keys:
                pipe = self.client.pipeline(transaction=True)
                pipe.hdel(self._records, *keys)
                pipe.zrem(self._order, *keys)
                pipe.hincrby(self._stats, "expired_total", len(keys))
                pipe.execute()
        if keys:
            log.warning("dlq_records_expired", records=len(keys), older_than_s=older_than_s)
        return len(keys)

    def stats(self) -> Mapping[str, int]:
        """Counters: records now, dead-lettered ever, expired ever, oldest age in seconds."""
        with map_redis_errors("dlq stats"):
            counters = self.client.hgetall(self._stats)
            oldest = cast(
                "list[tuple[bytes, float]]",
                self.client.zrange(self._order, 0, 0, withscores=True),
            )
        return {
            "records": len(self),
            "dead_lettered_total": int(counters.get(b"dead_lettered_total", 0)),
            "expired_total": int(counters.get(b"expired_total", 0)),
            "oldest_age_s": int(time.time() - oldest[0][1]) if oldest else 0,
        }
