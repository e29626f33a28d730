"""The live watermarks' and the load board's contracts: what the monitor writes and
the admission, ``/metrics``, the console and the CLI read."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from tidegate.load.board import BoardEntry
from tidegate.load.levels import Watermarks

__all__ = ["LoadBoardStore", "WatermarkConfigStore"]


@runtime_checkable
class WatermarkConfigStore(Protocol):
    """What the monitor, the admission and the CLI ask of the live watermarks."""

    defaults: Watermarks

    def get(self, queue: str | None = None) -> Watermarks:
        """The effective watermarks of ``queue`` (or the global ones)."""

    def get_many(self, queues: Iterable[str]) -> dict[str, Watermarks]:
        """The effective watermarks of several queues, in one read."""

    def overrides(self) -> dict[str, float]:
        """The stored overrides (``hwm``, ``hwm@edi.customs`` …)."""

    def configure(
        self,
        *,
        queue: str | None = None,
        hwm: int | None = None,
        lwm: int | None = None,
        shed_after: int | None = None,
    ) -> Watermarks:
        """Retune the running fleet; validated against every queue it affects."""

    def reset(self, queue: str | None = None) -> None:
        """Drop the overrides of ``queue`` (or every override)."""


@runtime_checkable
class LoadBoardStore(Protocol):
    """What the monitor writes and the admission, ``/metrics`` and the console read."""

    def now_ms(self) -> float:
        """The board's clock, ms since the epoch (what entries are stamped and aged with)."""

    def publish(self, entries: Sequence[BoardEntry]) -> None:
        """Replace each entry's queue's latest entry."""

    def read(self, queues: Sequence[str] | None = None) -> dict[str, BoardEntry]:
        """The latest entries (all, or of ``queues``), with their age on the clock."""

    def clear(self) -> None:
        """Forget every entry."""
