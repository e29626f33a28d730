"""The dead-letter queue: where a unit goes when it cannot be delivered, with the reason.

Celery on Redis has no DLQ (Celery #3261, #4797); a failed task is a log line and a
result nobody reads. Here every unrecoverable unit — a downstream that refuses the
document, retries exhausted, a consignment without a B/L — becomes one durable record
with everything needed to understand it and to replay it. Records are keyed by the
unit's idempotency key, so a unit dead-lettered twice is one record with ``attempts``
counting up, never two. Retention is explicit: :meth:`expire` removes old records and
*reports how many* (``dlq_records_expired``); nothing vanishes silently.

A replay takes a letter with :meth:`DeadLetterQueue.begin_replay`, which marks it "in
replay" in the same atomic step as the check, so two replays never publish one letter
twice. The mark ends when the unit settles — delivered: :meth:`~DeadLetterQueue.remove`;
failed again: :meth:`~DeadLetterQueue.add` writes the record back and it is replayable
again — or by itself at ``in_replay_until``, so a lost unit never blocks an operator.

Layout (built by :meth:`tidegate.keys.Keyspace.dlq`)::

    <prefix>:{dlq}:records    hash  key -> record JSON
    <prefix>:{dlq}:order      zset  key by first failure (Unix seconds): FIFO
    <prefix>:{dlq}:replaying  zset  key -> in replay until (ms, fleet clock)
    <prefix>:{dlq}:replays    hash  key -> replays so far
    <prefix>:{dlq}:stats      hash  dead_lettered_total, expired_total
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, cast

import redis

from tidegate._redis import clock_ms, lua_script, map_redis_errors, text
from tidegate.errors import ConfigurationError
from tidegate.events import UnitDeadLettered, emit
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load._listing import listed
from tidegate.logging import get_logger, key_hash

__all__ = ["DEFAULT_REPLAY_HOLD_S", "DeadLetter", "DeadLetterQueue", "ReplayMark"]

log = get_logger("tidegate.load")

#: How long a letter stays "in replay" when its replayed unit never settles, seconds.
#: Several times the default retry horizon (600 s), so a replayed unit that is still
#: being retried is never published a second time; short enough that a lost one is
#: replayable again within the hour.
DEFAULT_REPLAY_HOLD_S = 3600.0


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
        in_replay_until: while a replay of the unit is in flight, when its mark lapses
            (Unix seconds, fleet clock); ``None`` when no replay holds it. Read from
            the mark, never stored in the record.
        engine: the worker engine the unit belongs to (``"celery"``, ``"rq"``): a
            replay republishes it through that engine (``task`` is then the Celery
            task name or the RQ function path). Records written before it existed
            were Celery's.
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
    in_replay_until: float | None = None
    engine: str = "celery"

    def summary(self) -> dict[str, Any]:
        """The record without its payload, for listings and logs."""
        data = asdict(self)
        del data["payload"]
        return data

    def dead_lettered(self) -> UnitDeadLettered:
        """The decision event of storing this letter (by key hash: a key can be a B/L)."""
        return UnitDeadLettered(
            key_hash(self.key),
            self.task,
            self.reason,
            self.exception,
            self.attempts,
            self.batch_id,
            bl=self.bl_number is not None,
        )

    def matches(self, reason: str | None, batch_id: str | None) -> bool:
        """Whether a listing filtered by a reason substring and/or a batch id shows it."""
        if reason and reason.lower() not in self.reason.lower():
            return False
        return not (batch_id and self.batch_id != batch_id)

    def _record(self) -> str:
        data = asdict(self)
        del data["in_replay_until"]
        return json.dumps(data)

    @classmethod
    def _load(
        cls, raw: bytes | str, *, held_ms: float | None, replays: bytes | None, now_ms: float
    ) -> DeadLetter:
        data = json.loads(raw)
        data.pop("in_replay_until", None)
        data["replays"] = max(int(data.get("replays", 0)), int(replays or 0))
        until = held_ms / 1000.0 if held_ms is not None and held_ms > now_ms else None
        return cls(**data, in_replay_until=until)


@dataclass(frozen=True, slots=True)
class ReplayMark:
    """What :meth:`DeadLetterQueue.begin_replay` found.

    Attributes:
        status: ``"marked"`` (this replay holds the letter now), ``"in_replay"``
            (another replay holds it) or ``"gone"`` (resolved or purged meanwhile).
        in_replay_until: when the holding mark lapses (Unix seconds), or ``None``.
        replays: the letter's replays, this one included when ``"marked"``.
    """

    status: Literal["marked", "in_replay", "gone"]
    in_replay_until: float | None
    replays: int

    @property
    def taken(self) -> bool:
        """Whether this caller may publish the letter (and must cancel if it cannot)."""
        return self.status == "marked"


class DeadLetterQueue:
    """Durable dead letters in Redis, FIFO by first failure.

    Args:
        client: a sync Redis client.
        prefix: key prefix (keys: :meth:`tidegate.keys.Keyspace.dlq`).
        clock: ms since the epoch for replay marks, failure times and ages; ``None`` =
            Redis ``TIME`` (the fleet clock) for replay marks and this host's wall clock
            for failure times, as a worker records them (tests pass a
            :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        keys = Keyspace(prefix).dlq()
        self._records, self._order, self._stats = keys.records, keys.order, keys.stats
        self._replaying = keys.replaying
        self._replays = keys.replays
        self._clock = clock
        self._mark = client.register_script(lua_script("dlq_replay_mark", "tidegate.load"))

    def _now_ms(self) -> float:
        return clock_ms(self.client, self._clock, "dlq clock")

    def _wall_s(self) -> float:
        """Failure times: the injected clock, else this host's (first_failed_at is a
        worker's wall time, compared with wall times elsewhere)."""
        return time.time() if self._clock is None else float(self._clock()) / 1000.0

    def _letters(self, keys: Sequence[str] | Sequence[bytes]) -> list[DeadLetter | None]:
        """The records of ``keys`` with their replay marks, in one round trip."""
        if not keys:
            return []
        names = [text(k) for k in keys]
        with map_redis_errors("dlq read"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hmget(self._records, names)
            pipe.zmscore(self._replaying, names)
            pipe.hmget(self._replays, names)
            if self._clock is None:
                pipe.time()
            replies = pipe.execute()
        raws, held, counts = replies[0], replies[1], replies[2]
        if self._clock is None:
            seconds, micros = replies[3]
            now_ms = seconds * 1000.0 + micros / 1000.0
        else:
            now_ms = float(self._clock())
        return [
            None
            if raw is None
            else DeadLetter._load(raw, held_ms=mark, replays=count, now_ms=now_ms)
            for raw, mark, count in zip(raws, held, counts, strict=True)
        ]

    def add(self, letter: DeadLetter) -> DeadLetter:
        """Record ``letter``; a key already in the DLQ keeps its first failure time.

        Writing a letter ends any replay mark on it: the unit has come back, so it is
        replayable again (``attempts`` counts the failed replay).
        """
        now = self._wall_s()
        with map_redis_errors("dead-letter"):
            previous = self.get(letter.key)
            first = previous.first_failed_at if previous else (letter.first_failed_at or now)
            attempts = max(letter.attempts, previous.attempts + 1 if previous else 1)
            replays = max(letter.replays, previous.replays if previous else 0)
            stored = replace(
                letter,
                first_failed_at=first,
                last_failed_at=now,
                attempts=attempts,
                replays=replays,
                in_replay_until=None,
            )
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(self._records, letter.key, stored._record())
            pipe.zadd(self._order, {letter.key: first}, nx=True)
            pipe.zrem(self._replaying, letter.key)
            pipe.hincrby(self._stats, "dead_lettered_total", 1)
            pipe.execute()
        emit(stored.dead_lettered())
        return stored

    def get(self, key: str) -> DeadLetter | None:
        return self._letters([key])[0]

    def __len__(self) -> int:
        with map_redis_errors("dlq count"):
            return int(self.client.zcard(self._order))

    def iter(
        self, *, reason: str | None = None, batch_id: str | None = None, limit: int | None = None
    ) -> Iterator[DeadLetter]:
        """Records oldest first, filtered by a reason substring and/or batch id."""
        letters = (
            letter for letter in self._pages() if letter is None or letter.matches(reason, batch_id)
        )
        return listed(letters, limit)

    def _pages(self) -> Iterator[DeadLetter | None]:
        for start in range(0, len(self), 500):
            with map_redis_errors("dlq list"):
                keys = cast("list[bytes]", self.client.zrange(self._order, start, start + 499))
            yield from self._letters(keys)

    def begin_replay(self, key: str, *, hold_s: float = DEFAULT_REPLAY_HOLD_S) -> ReplayMark:
        """Mark ``key`` in replay for ``hold_s``, unless a replay already holds it.

        Atomic (one Lua script): of two replays asking at once, exactly one gets
        ``"marked"``. The record stays until the unit is delivered (:meth:`remove`).

        Raises:
            ConfigurationError: ``hold_s`` is not a finite number > 0.
        """
        if not (math.isfinite(hold_s) and hold_s > 0):
            raise ConfigurationError(f"hold_s must be a finite number > 0, got {hold_s!r}")
        now = "" if self._clock is None else repr(float(self._clock()))
        with map_redis_errors("dlq begin replay"):
            status, until_ms, replays = self._mark(
                [self._records, self._replaying, self._replays],
                [now, max(1, round(hold_s * 1000)), key],
            )
        name = text(status)
        until = float(until_ms) / 1000.0
        return ReplayMark(
            cast("Literal['marked', 'in_replay', 'gone']", name),
            until if name != "gone" else None,
            int(replays),
        )

    def cancel_replay(self, key: str) -> None:
        """Undo this process's :meth:`begin_replay` when the publish itself failed."""
        with map_redis_errors("dlq cancel replay"):
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(self._replaying, key)
            pipe.hincrby(self._replays, key, -1)
            pipe.execute()

    def remove(self, key: str) -> bool:
        """Delete one record (after a successful replay), its replay mark included."""
        with map_redis_errors("dlq remove"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hdel(self._records, key)
            pipe.zrem(self._order, key)
            pipe.zrem(self._replaying, key)
            pipe.hdel(self._replays, key)
            removed, *_ = pipe.execute()
        return bool(removed)

    def purge(self) -> int:
        """Delete every record; returns how many there were."""
        count = len(self)
        with map_redis_errors("dlq purge"):
            self.client.delete(self._records, self._order, self._replaying, self._replays)
        log.warning("dlq_purged", records=count)
        return count

    def expire(self, *, older_than_s: float) -> int:
        """Remove records first failed more than ``older_than_s`` ago; report the count."""
        cutoff = self._wall_s() - older_than_s
        with map_redis_errors("dlq expire"):
            keys = self.client.zrangebyscore(self._order, "-inf", cutoff)
            if keys:
                pipe = self.client.pipeline(transaction=True)
                pipe.hdel(self._records, *keys)
                pipe.zrem(self._order, *keys)
                pipe.zrem(self._replaying, *keys)
                pipe.hdel(self._replays, *keys)
                pipe.hincrby(self._stats, "expired_total", len(keys))
                pipe.execute()
        if keys:
            log.warning("dlq_records_expired", records=len(keys), older_than_s=older_than_s)
        return len(keys)

    def stats(self) -> Mapping[str, int]:
        """Counters: records now, in replay now, dead-lettered ever, expired ever, oldest age."""
        now_ms = self._now_ms()
        with map_redis_errors("dlq stats"):
            counters = self.client.hgetall(self._stats)
            oldest = cast(
                "list[tuple[bytes, float]]",
                self.client.zrange(self._order, 0, 0, withscores=True),
            )
            in_replay = int(self.client.zcount(self._replaying, f"({now_ms!r}", "+inf"))
        return {
            "records": len(self),
            "in_replay": in_replay,
            "dead_lettered_total": int(counters.get(b"dead_lettered_total", 0)),
            "expired_total": int(counters.get(b"expired_total", 0)),
            "oldest_age_s": int(self._wall_s() - oldest[0][1]) if oldest else 0,
        }
