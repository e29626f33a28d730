"""The registry of outstanding units in one process:
:class:`~tidegate.load.protocols.OutstandingStore` in dicts, on an injectable
clock.

It mirrors the Redis scripts step by step (``outstanding_record.lua``,
``outstanding_pushed.lua``, ``outstanding_requeued.lua``, ``outstanding_drop.lua``,
``worker_beat.lua``, ``sweep_take.lua``): sequences are the clock in µs, never less than
the last one plus one; a worker is dead once silent for ``dead_after_s`` on the clock.
What only a Redis broker needs — the publish that pushes the message in the same
script, the sweep's reads of kombu's lists — stays on the Redis store.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

from tidegate.load.memory._clock import wall_ms
from tidegate.load.outstanding_units import IndexEntry, OrphanVerdict, OutstandingUnit

__all__ = ["MemoryOutstanding"]


class MemoryOutstanding:
    """Published, unsettled units and the fleet's roll, in this process.

    Args:
        clock: ms since the epoch (a ``ManualClock``'s ``now_ms`` in tests); the wall
            clock when omitted.
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self._now = clock if clock is not None else wall_ms
        self._units: dict[str, str] = {}
        self._misses: dict[str, int] = {}
        self._queues: set[str] = set()
        self._seq = 0
        #: lane -> stage -> key -> sequence: the sweep's index.
        self._index: dict[str, dict[str, dict[str, int]]] = {}
        self._workers: dict[str, float] = {}
        self._armed = 0
        self._lock = threading.RLock()

    # -- the index (lock held) --------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq = max(self._seq + 1, math.floor(float(self._now()) * 1000))
        return self._seq

    def _stage(self, lane: str, stage: Literal["published", "pushed"]) -> dict[str, int]:
        return self._index.setdefault(lane, {}).setdefault(stage, {})

    def _unindex(self, key: str) -> None:
        raw = self._units.get(key)
        if raw is None:
            return
        lane = OutstandingUnit.from_json(key, raw).index_lane
        self._stage(lane, "published").pop(key, None)
        self._stage(lane, "pushed").pop(key, None)

    # -- a unit's life ----------------------------------------------------------------

    def record(self, unit: OutstandingUnit) -> int:
        """Remember ``unit`` before its message is pushed (replacing an older record of
        its key, and its place in the index); returns its ``s0``."""
        with self._lock:
            self._unindex(unit.key)
            s0 = self._next_seq()
            self._units[unit.key] = unit.to_json()
            self._misses.pop(unit.key, None)
            self._queues.add(unit.queue)
            self._stage(unit.index_lane, "published")[unit.key] = s0
            self._stage(unit.index_lane, "pushed").pop(unit.key, None)
            return s0

    def pushed(self, key: str, lane: str, s0: int, *, s1: int | None = None) -> int:
        """The message recorded under ``s0`` is in ``lane``: returns its ``s1`` (the next
        sequence, or the given one), 0 if the unit was not waiting under ``s0``."""
        with self._lock:
            published = self._stage(lane, "published")
            if published.get(key) != int(s0):
                return 0
            seq = int(s1) if s1 is not None else self._next_seq()
            del published[key]
            self._stage(lane, "pushed")[key] = seq
            return seq

    def requeued(self, key: str, task_id: str) -> int:
        """``task_id`` (the unit's current message) was pushed again: a new ``s1``, 0 if
        the record is gone or of another message."""
        with self._lock:
            raw = self._units.get(key)
            if raw is None:
                return 0
            unit = OutstandingUnit.from_json(key, raw)
            if unit.task_id != task_id:
                return 0
            s1 = self._next_seq()
            self._stage(unit.index_lane, "published").pop(key, None)
            self._stage(unit.index_lane, "pushed")[key] = s1
            self._misses.pop(key, None)
            return s1

    def hold(self, key: str) -> None:
        """``key`` is parked: out of the index, its record kept."""
        with self._lock:
            self._unindex(key)
            self._misses.pop(key, None)

    def settle(self, key: str) -> None:
        """Forget ``key``: it was delivered or dead-lettered."""
        with self._lock:
            self._unindex(key)
            self._misses.pop(key, None)
            self._units.pop(key, None)

    # -- reads ------------------------------------------------------------------------

    def get(self, key: str) -> OutstandingUnit | None:
        with self._lock:
            raw = self._units.get(key)
        return None if raw is None else OutstandingUnit.from_json(key, raw)

    def indexed(self, key: str, lane: str) -> IndexEntry | None:
        """Where the sweep's index of ``lane`` has ``key``, if anywhere."""
        with self._lock:
            pushed = self._stage(lane, "pushed").get(key)
            published = self._stage(lane, "published").get(key)
        if pushed is not None:
            return IndexEntry("pushed", pushed)
        return None if published is None else IndexEntry("published", published)

    def __len__(self) -> int:
        with self._lock:
            return len(self._units)

    def queues(self) -> list[str]:
        with self._lock:
            return sorted(self._queues)

    def iter_pages(self, page: int) -> Iterator[list[OutstandingUnit]]:
        """Every record, ``page`` at a time (a snapshot of the keys, as HSCAN walks)."""
        with self._lock:
            keys = list(self._units)
        for start in range(0, len(keys), max(1, page)):
            units = [self.get(key) for key in keys[start : start + max(1, page)]]
            found = [unit for unit in units if unit is not None]
            if found:
                yield found

    def misses_of(self, keys: list[str]) -> dict[str, int]:
        with self._lock:
            return {k: self._misses[k] for k in keys if k in self._misses}

    def store_misses(self, verdict: OrphanVerdict, *, present: Iterable[str]) -> None:
        """Write one sweep's miss counts (present units back to 0)."""
        with self._lock:
            for key in present:
                self._misses.pop(key, None)
            self._misses.update(verdict.misses)

    # -- the fleet's roll -------------------------------------------------------------

    def beat(
        self, worker: str, *, dead_after_s: float, arm_sweeps: int, now_ms: float | None = None
    ) -> int:
        """Record that ``worker`` is alive; arm ``arm_sweeps`` sweeps if another worker
        has been silent for ``dead_after_s``. Returns how many dead workers were found."""
        with self._lock:
            now = float(self._now()) if now_ms is None else float(now_ms)
            if worker:
                self._workers[worker] = now
            limit = now - int(dead_after_s * 1000)
            dead = [name for name, last in self._workers.items() if last <= limit]
            for name in dead:
                del self._workers[name]
            if dead and self._armed < arm_sweeps:
                self._armed = arm_sweeps
            return len(dead)

    def retire(self, worker: str) -> None:
        with self._lock:
            self._workers.pop(worker, None)

    def arm(self, sweeps: int) -> None:
        with self._lock:
            self._armed = int(sweeps)

    def take_armed_sweep(self) -> bool:
        """Use one armed sweep; False when none is armed (and the miss counts are gone:
        misses only count in consecutive sweeps)."""
        with self._lock:
            if self._armed <= 0:
                self._armed = 0
                self._misses.clear()
                return False
            self._armed -= 1
            return True

    def workers(self) -> list[str]:
        """The workers on the roll (alive, or not yet found dead), sorted."""
        with self._lock:
            return sorted(self._workers)
