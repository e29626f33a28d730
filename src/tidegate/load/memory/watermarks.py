"""The live watermarks and the load board in one process.

:class:`MemoryWatermarkStore` shares its rules with the Redis store
(:class:`~tidegate.load.watermark_store.WatermarkOverrides`) and keeps the raw override
fields in a dict. :class:`MemoryLoadBoard` keeps each entry as the JSON the Redis board
stores, so an entry that would not survive Redis does not survive here either, and ages
it on the injected clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from tidegate.load.board import BoardEntry
from tidegate.load.levels import Watermarks
from tidegate.load.memory._clock import wall_ms
from tidegate.load.watermark_store import WatermarkOverrides

__all__ = ["MemoryLoadBoard", "MemoryWatermarkStore"]


class MemoryWatermarkStore(WatermarkOverrides):
    """The live watermarks of one process.

    Args:
        defaults: the process's watermarks (``Settings.watermarks``); the built-in
            :class:`~tidegate.load.levels.Watermarks` when omitted.
    """

    def __init__(self, *, defaults: Watermarks | None = None) -> None:
        super().__init__(defaults=defaults)
        self._fields: dict[str, float] = {}
        self._lock = threading.Lock()

    def _read(self) -> dict[str, float]:
        with self._lock:
            return dict(self._fields)

    def _write(self, fields: Mapping[str, float]) -> None:
        with self._lock:
            self._fields.update({k: float(v) for k, v in fields.items()})

    def _delete(self, fields: Iterable[str] | None) -> None:
        with self._lock:
            if fields is None:
                self._fields.clear()
            else:
                for name in fields:
                    self._fields.pop(name, None)


class MemoryLoadBoard:
    """The monitor's board in one process.

    Args:
        clock: ms since the epoch (a ``ManualClock``'s ``now_ms`` in tests); the wall
            clock when omitted.
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self._now = clock if clock is not None else wall_ms
        self._entries: dict[str, str] = {}
        self._lock = threading.Lock()

    def now_ms(self) -> float:
        """The board's clock, ms since the epoch."""
        return float(self._now())

    def publish(self, entries: Sequence[BoardEntry]) -> None:
        with self._lock:
            self._entries.update({entry.state.queue: entry.to_json() for entry in entries})

    def read(self, queues: Sequence[str] | None = None) -> dict[str, BoardEntry]:
        """The latest entries (all, or of ``queues``), with their age on the clock."""
        with self._lock:
            now_ms = self.now_ms()
            names = list(self._entries) if queues is None else list(queues)
            items = [(q, self._entries[q]) for q in names if q in self._entries]
        return {queue: BoardEntry.from_json(value, now_ms) for queue, value in items}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
