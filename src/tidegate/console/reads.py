"""The live views' reads: one pipelined round trip per view per refresh.

The page refreshes every view every second or two, from every open browser; a read
that took one round trip per gate or per record would multiply with both. Each
method here queues every command its view needs on one pipeline and sends it once;
the figures are built from the replies by :mod:`tidegate.console.model`.

The one exception is finding gates: their names are only in the keyspace, and SCAN
takes as many round trips as the keyspace needs. So names are discovered at most
every ``discover_every_s`` (and the gates named at start are always shown).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import redis

from tidegate._redis import map_redis_errors
from tidegate.console.history import DEFAULT_KEEP_S, Point, points_from_ring
from tidegate.console.model import (
    GateRow,
    LetterGroup,
    Parked,
    QueueRow,
    gate_rows,
    letter_groups,
    now_ms_of,
    parked,
    quarantine_groups,
    queue_rows,
)
from tidegate.console.sampler import queue_gate_commands
from tidegate.flow.gate import fleet_gate_names
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = ["DEFAULT_DISCOVER_EVERY_S", "ConsoleReads", "RedisReads"]

#: How often the set of gates is looked for again (a SCAN of the keyspace), seconds.
DEFAULT_DISCOVER_EVERY_S = 15.0


class ConsoleReads(Protocol):
    """What the views read: :class:`RedisReads` for a fleet,
    :class:`~tidegate.console.memory.MemoryReads` for tests without Redis."""

    def gate_names(self) -> list[str]: ...

    def gates(self, names: Sequence[str]) -> list[GateRow]: ...

    def queues(self) -> list[QueueRow]: ...

    def held_back(self) -> tuple[list[LetterGroup], list[LetterGroup], Parked]: ...

    def history(self, *, keep_s: float = ...) -> list[Point]: ...


class RedisReads:
    """The console's reads over one Redis.

    Args:
        client: a sync Redis client.
        prefix: tidegate's key prefix.
        gates: gates always shown, whether or not the fleet holds state for them.
        discover_every_s: how often other gates are looked for (0: never).
        monotonic: the clock that spaces discoveries (tests pass their own).
        gate_env: where the gates' defaults are read (``TIDEGATE_<NAME>_*``, as the
            workers read them); this process's environment when ``None``.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        gates: Sequence[str] = (),
        discover_every_s: float = DEFAULT_DISCOVER_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
        gate_env: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.keys = Keyspace(prefix)
        self._named = tuple(gates)
        self._found: tuple[str, ...] = ()
        self._discover_every_s = discover_every_s
        self._monotonic = monotonic
        self._next_discovery = float("-inf")
        self.gate_env = gate_env

    def gate_names(self) -> list[str]:
        """The gates shown: those named at start and those found in the keyspace."""
        if self._discover_every_s > 0 and self._monotonic() >= self._next_discovery:
            self._found = tuple(fleet_gate_names(self.client, prefix=self.prefix))
            self._next_discovery = self._monotonic() + self._discover_every_s
        return sorted(set(self._named) | set(self._found))

    def gates(self, names: Sequence[str]) -> list[GateRow]:
        """Every gate in ``names``: rate, burst, tokens, pause, leases."""
        with map_redis_errors("console gates"):
            pipe = self.client.pipeline(transaction=False)
            queue_gate_commands(pipe, names, self.prefix)
            pipe.time()
            replies = pipe.execute()
        return gate_rows(names, replies, env=self.gate_env)

    def queues(self) -> list[QueueRow]:
        """Every queue the monitor published: depth, watermarks, signal, workers."""
        with map_redis_errors("console queues"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self.keys.load_board())
            pipe.time()
            board, now = pipe.execute()
        return queue_rows(board, now)

    def history(self, *, keep_s: float = DEFAULT_KEEP_S) -> list[Point]:
        """The charts' points of the last ``keep_s`` seconds, oldest first."""
        with map_redis_errors("console history"):
            pipe = self.client.pipeline(transaction=False)
            pipe.lrange(self.keys.console_history(), 0, -1)
            pipe.time()
            raws, now = pipe.execute()
        return points_from_ring(raws, now_ms=now_ms_of(now), keep_s=keep_s)

    def held_back(self) -> tuple[list[LetterGroup], list[LetterGroup], Parked]:
        """Dead letters and quarantined documents by reason and class, and parked units.

        Warning: every record is read on each refresh (payloads included, never
        rendered), so a DLQ of many thousands of large records makes this view heavy.
        """
        dlq, quarantine, parking = self.keys.dlq(), self.keys.quarantine(), self.keys.parking()
        with map_redis_errors("console dead letters"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hvals(dlq.records)
            pipe.zrange(dlq.replaying, 0, -1, withscores=True)
            pipe.hgetall(quarantine.records)
            pipe.hgetall(quarantine.since)
            pipe.zcard(parking.due)
            pipe.zcard(parking.inflight)
            pipe.zrange(parking.due, 0, 0, withscores=True)
            pipe.zrange(parking.due, -1, -1, withscores=True)
            pipe.time()
            letters, replaying, shed, since, waiting, moving, first, last, now = pipe.execute()
        return (
            letter_groups(letters, replaying, now),
            quarantine_groups(shed, since, now),
            parked(waiting, moving, first, last, now),
        )
