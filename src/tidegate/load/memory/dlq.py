"""The dead-letter queue in one process: :class:`~tidegate.load.DeadLetterQueue`'s twin.

Same records (JSON), same FIFO order by first failure, same replay marks (the check
and the mark one step, under the lock, as ``dlq_replay_mark.lua`` makes them one step
in Redis) and the same counters; ``tests/load/stores/test_dlq_behaviour.py`` runs on
both. Not durable: a fleet's dead letters live in Redis.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

from tidegate.errors import ConfigurationError
from tidegate.events import emit
from tidegate.load._listing import listed
from tidegate.load.dlq import DEFAULT_REPLAY_HOLD_S, DeadLetter, ReplayMark
from tidegate.load.memory._clock import wall_ms
from tidegate.load.memory._lease import stamp
from tidegate.logging import get_logger

__all__ = ["MemoryDeadLetterQueue"]

log = get_logger("tidegate.load")

#: Records read per page by :meth:`MemoryDeadLetterQueue.iter`, as the Redis queue does.
_PAGE = 500


class MemoryDeadLetterQueue:
    """Dead letters in dicts, under a lock.

    Args:
        clock: ms since the epoch, for replay marks, failure times and ages; ``None`` =
            this host's wall clock (tests pass a
            :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self._now: Callable[[], float] = clock if clock is not None else wall_ms
        self._lock = threading.Lock()
        self._records: dict[str, str] = {}
        self._order: dict[str, float] = {}
        self._replaying: dict[str, float] = {}
        self._replays: dict[str, int] = {}
        self._stats: Counter[str] = Counter()

    def _letter(self, key: str, now_ms: float) -> DeadLetter | None:
        raw = self._records.get(key)
        if raw is None:
            return None
        count = self._replays.get(key)
        return DeadLetter._load(
            raw,
            held_ms=self._replaying.get(key),
            replays=None if count is None else str(count).encode(),
            now_ms=now_ms,
        )

    def add(self, letter: DeadLetter) -> DeadLetter:
        """Record ``letter``; a key already in the DLQ keeps its first failure time."""
        with self._lock:
            now_ms = self._now()
            now = now_ms / 1000.0
            previous = self._letter(letter.key, now_ms)
            first = previous.first_failed_at if previous else (letter.first_failed_at or now)
            stored = replace(
                letter,
                first_failed_at=first,
                last_failed_at=now,
                attempts=max(letter.attempts, previous.attempts + 1 if previous else 1),
                replays=max(letter.replays, previous.replays if previous else 0),
                in_replay_until=None,
            )
            self._records[letter.key] = stored._record()
            self._order.setdefault(letter.key, first)
            self._replaying.pop(letter.key, None)
            self._stats["dead_lettered_total"] += 1
        emit(stored.dead_lettered())
        return stored

    def get(self, key: str) -> DeadLetter | None:
        with self._lock:
            return self._letter(key, self._now())

    def __len__(self) -> int:
        with self._lock:
            return len(self._order)

    def iter(
        self, *, reason: str | None = None, batch_id: str | None = None, limit: int | None = None
    ) -> Iterator[DeadLetter]:
        """Records oldest first, filtered by a reason substring and/or batch id.

        Read a page at a time, like the Redis queue: a letter's replay mark is as it
        was when its page was read (a replay asks again, atomically, before taking it).
        """
        letters = (
            letter for letter in self._pages() if letter is None or letter.matches(reason, batch_id)
        )
        return listed(letters, limit)

    def _pages(self) -> Iterator[DeadLetter | None]:
        with self._lock:
            keys = [key for _, key in sorted((first, key) for key, first in self._order.items())]
        for start in range(0, len(keys), _PAGE):
            with self._lock:
                now_ms = self._now()
                page = [self._letter(key, now_ms) for key in keys[start : start + _PAGE]]
            yield from page

    def begin_replay(self, key: str, *, hold_s: float = DEFAULT_REPLAY_HOLD_S) -> ReplayMark:
        """Mark ``key`` in replay for ``hold_s``, unless a replay already holds it.

        Raises:
            ConfigurationError: ``hold_s`` is not a finite number > 0.
        """
        if not (math.isfinite(hold_s) and hold_s > 0):
            raise ConfigurationError(f"hold_s must be a finite number > 0, got {hold_s!r}")
        with self._lock:
            now_ms = self._now()
            replays = self._replays.get(key, 0)
            if key not in self._records:
                return ReplayMark("gone", None, replays)
            held = self._replaying.get(key)
            if held is not None and held > now_ms:
                return ReplayMark("in_replay", held / 1000.0, replays)
            until = stamp(now_ms + max(1, round(hold_s * 1000)))
            self._replaying[key] = until
            self._replays[key] = replays + 1
            return ReplayMark("marked", until / 1000.0, replays + 1)

    def cancel_replay(self, key: str) -> None:
        """Undo this process's :meth:`begin_replay` when the publish itself failed."""
        with self._lock:
            self._replaying.pop(key, None)
            self._replays[key] = self._replays.get(key, 0) - 1

    def remove(self, key: str) -> bool:
        """Delete one record (after a successful replay), its replay mark included."""
        with self._lock:
            removed = self._records.pop(key, None) is not None
            self._order.pop(key, None)
            self._replaying.pop(key, None)
            self._replays.pop(key, None)
        return removed

    def purge(self) -> int:
        """Delete every record; returns how many there were."""
        with self._lock:
            count = len(self._order)
            self._records.clear()
            self._order.clear()
            self._replaying.clear()
            self._replays.clear()
        log.warning("dlq_purged", records=count)
        return count

    def expire(self, *, older_than_s: float) -> int:
        """Remove records first failed more than ``older_than_s`` ago; report the count."""
        with self._lock:
            cutoff = self._now() / 1000.0 - older_than_s
            keys = [key for key, first in self._order.items() if first <= cutoff]
            for key in keys:
                self._records.pop(key, None)
                del self._order[key]
                self._replaying.pop(key, None)
                self._replays.pop(key, None)
            if keys:
                self._stats["expired_total"] += len(keys)
        if keys:
            log.warning("dlq_records_expired", records=len(keys), older_than_s=older_than_s)
        return len(keys)

    def stats(self) -> Mapping[str, int]:
        """Counters: records now, in replay now, dead-lettered ever, expired ever, oldest age."""
        with self._lock:
            now_ms = self._now()
            oldest = min(self._order.values(), default=None)
            return {
                "records": len(self._order),
                "in_replay": sum(1 for until in self._replaying.values() if until > now_ms),
                "dead_lettered_total": self._stats["dead_lettered_total"],
                "expired_total": self._stats["expired_total"],
                "oldest_age_s": int(now_ms / 1000.0 - oldest) if oldest is not None else 0,
            }
