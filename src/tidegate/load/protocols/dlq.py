"""The dead-letter queue's contract: one record per unit that cannot be delivered."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol, runtime_checkable

from tidegate.load.dlq import DEFAULT_REPLAY_HOLD_S, DeadLetter, ReplayMark

__all__ = ["DeadLetterStore"]


@runtime_checkable
class DeadLetterStore(Protocol):
    """Dead letters keyed by idempotency key, FIFO by first failure, with replay marks.

    Callers: the delivery driver adds and removes (``delivery/driver.py``), replays
    mark and cancel (``load/replay.py``), the CLI, console, metrics and reports list,
    expire, purge and read stats.
    """

    def add(self, letter: DeadLetter) -> DeadLetter:
        """Record ``letter`` (a known key keeps its first failure, attempts + 1) and
        end any replay mark on it; return what was stored."""
        ...

    def get(self, key: str) -> DeadLetter | None: ...

    def __len__(self) -> int: ...

    def iter(
        self, *, reason: str | None = None, batch_id: str | None = None, limit: int | None = None
    ) -> Iterator[DeadLetter]:
        """Records oldest first failure first, filtered by a reason substring
        (case-insensitive) and/or batch id."""
        ...

    def begin_replay(self, key: str, *, hold_s: float = DEFAULT_REPLAY_HOLD_S) -> ReplayMark:
        """Mark ``key`` in replay for ``hold_s`` unless a mark holds it; atomic."""
        ...

    def cancel_replay(self, key: str) -> None:
        """Undo a :meth:`begin_replay` whose publish failed."""
        ...

    def remove(self, key: str) -> bool:
        """Delete one record and its mark (its unit was delivered)."""
        ...

    def purge(self) -> int:
        """Delete every record; how many there were."""
        ...

    def expire(self, *, older_than_s: float) -> int:
        """Remove records first failed more than ``older_than_s`` ago; how many."""
        ...

    def stats(self) -> Mapping[str, int]:
        """Counters: records, in_replay, dead_lettered_total, expired_total,
        oldest_age_s."""
        ...
