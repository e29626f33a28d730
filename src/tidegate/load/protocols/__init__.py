"""What the callers of each store rely on, apart from where the state lives.

Every store of ``tidegate.load`` has its protocol here, a Redis implementation (the
class of the same concern in ``tidegate.load``: :class:`~tidegate.load.ParkingLot`,
:class:`~tidegate.load.Quarantine`, :class:`~tidegate.load.DeadLetterQueue`,
:class:`~tidegate.load.DeliveryLedger`, :class:`~tidegate.load.outstanding.Outstanding`,
:class:`~tidegate.load.WatermarkStore`, :class:`~tidegate.load.LoadBoard`) and a memory
twin in :mod:`tidegate.load.memory`; one behaviour suite (``tests/load/stores/``) runs
on both, so a caller typed against the protocol gets the same behaviour from either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.load.protocols.dlq import DeadLetterStore
from tidegate.load.protocols.ledger import LedgerStore
from tidegate.load.protocols.outstanding import OutstandingStore
from tidegate.load.protocols.parking import ParkingStore
from tidegate.load.protocols.quarantine import QuarantineStore
from tidegate.load.protocols.watermarks import LoadBoardStore, WatermarkConfigStore

__all__ = [
    "DeadLetterStore",
    "LedgerStore",
    "LoadBoardStore",
    "OutstandingStore",
    "ParkingStore",
    "QuarantineStore",
    "WatermarkConfigStore",
]

if TYPE_CHECKING:
    from tidegate.load.board import LoadBoard
    from tidegate.load.dlq import DeadLetterQueue
    from tidegate.load.ledger import DeliveryLedger
    from tidegate.load.memory import (
        MemoryDeadLetterQueue,
        MemoryLedger,
        MemoryLoadBoard,
        MemoryOutstanding,
        MemoryParkingLot,
        MemoryQuarantine,
        MemoryWatermarkStore,
    )
    from tidegate.load.outstanding import Outstanding
    from tidegate.load.parking import ParkingLot
    from tidegate.load.quarantine import Quarantine
    from tidegate.load.watermark_store import WatermarkStore

    def _both_backends_conform(
        *,
        lots: tuple[ParkingLot, MemoryParkingLot],
        quarantines: tuple[Quarantine, MemoryQuarantine],
        dlqs: tuple[DeadLetterQueue, MemoryDeadLetterQueue],
        ledgers: tuple[DeliveryLedger, MemoryLedger],
        outstanding: tuple[Outstanding, MemoryOutstanding],
        watermarks: tuple[WatermarkStore, MemoryWatermarkStore],
        boards: tuple[LoadBoard, MemoryLoadBoard],
    ) -> tuple[
        tuple[ParkingStore, ...],
        tuple[QuarantineStore, ...],
        tuple[DeadLetterStore, ...],
        tuple[LedgerStore, ...],
        tuple[OutstandingStore, ...],
        tuple[WatermarkConfigStore, ...],
        tuple[LoadBoardStore, ...],
    ]:
        """Never called: mypy checks here that each implementation has its protocol."""
        return lots, quarantines, dlqs, ledgers, outstanding, watermarks, boards
