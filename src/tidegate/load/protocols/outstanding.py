"""The outstanding units' contract: what the orphan sweep watches until each unit settles."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from tidegate.load.outstanding_units import IndexEntry, OrphanVerdict, OutstandingUnit

__all__ = ["OutstandingStore"]


@runtime_checkable
class OutstandingStore(Protocol):
    """The registry of published, unsettled units and the fleet's roll of workers.

    Sequences (``s0``, ``s1``) come from the store's clock in µs, never smaller than
    the last one handed out plus one; worker ages are measured on the same clock.
    """

    def record(self, unit: OutstandingUnit) -> int:
        """Remember ``unit`` before its message is pushed; its ``s0``."""

    def pushed(self, key: str, lane: str, s0: int, *, s1: int | None = None) -> int:
        """The message recorded under ``s0`` is in ``lane``: its ``s1``, 0 if not waiting."""

    def requeued(self, key: str, task_id: str) -> int:
        """The unit's current message was pushed again: a new ``s1``, 0 if not its message."""

    def hold(self, key: str) -> None:
        """``key`` is parked: out of the index, record kept."""

    def settle(self, key: str) -> None:
        """Forget ``key``: delivered or dead-lettered."""

    def get(self, key: str) -> OutstandingUnit | None:
        """``key``'s record."""

    def indexed(self, key: str, lane: str) -> IndexEntry | None:
        """Where the sweep's index of ``lane`` has ``key``, if anywhere."""

    def __len__(self) -> int:
        """How many units are recorded."""

    def queues(self) -> list[str]:
        """Every queue a recorded unit was published to, sorted."""

    def iter_pages(self, page: int) -> Iterator[list[OutstandingUnit]]:
        """Every record, ``page`` at a time."""

    def misses_of(self, keys: list[str]) -> dict[str, int]:
        """The stored miss counts of ``keys`` (absent keys have none)."""

    def store_misses(self, verdict: OrphanVerdict, *, present: Iterable[str]) -> None:
        """Write one sweep's miss counts (present units back to 0)."""

    def beat(
        self, worker: str, *, dead_after_s: float, arm_sweeps: int, now_ms: float | None = None
    ) -> int:
        """``worker`` is alive; arm sweeps for workers silent ``dead_after_s``; how many."""

    def retire(self, worker: str) -> None:
        """``worker`` stops cleanly: its silence is no death."""

    def workers(self) -> list[str]:
        """The workers on the roll (alive, or not yet found dead), sorted."""

    def arm(self, sweeps: int) -> None:
        """Arm ``sweeps`` sweeps now."""

    def take_armed_sweep(self) -> bool:
        """Use one armed sweep; False when none is (and the miss counts are gone)."""
