"""What the callers of each store rely on, apart from where the state lives.

Every store of ``tidegate.load`` has a protocol here, a Redis implementation (the
class of the same concern in ``tidegate.load``: :class:`~tidegate.load.ParkingLot`,
:class:`~tidegate.load.Quarantine`, :class:`~tidegate.load.DeadLetterQueue`) and a
memory twin in :mod:`tidegate.load.memory`; one behaviour suite
(``tests/load/stores/``) runs on both, so a caller typed against the protocol gets
the same behaviour from either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidegate.load.protocols.dlq import DeadLetterStore
from tidegate.load.protocols.parking import ParkingStore
from tidegate.load.protocols.quarantine import QuarantineStore

__all__ = ["DeadLetterStore", "ParkingStore", "QuarantineStore"]

if TYPE_CHECKING:
    from tidegate.load.dlq import DeadLetterQueue
    from tidegate.load.memory import MemoryDeadLetterQueue, MemoryParkingLot, MemoryQuarantine
    from tidegate.load.parking import ParkingLot
    from tidegate.load.quarantine import Quarantine

    def _both_backends_conform(
        lots: tuple[ParkingLot, MemoryParkingLot],
        quarantines: tuple[Quarantine, MemoryQuarantine],
        dlqs: tuple[DeadLetterQueue, MemoryDeadLetterQueue],
    ) -> tuple[tuple[ParkingStore, ...], tuple[QuarantineStore, ...], tuple[DeadLetterStore, ...]]:
        """Never called: mypy checks here that each implementation has its protocol."""
        return lots, quarantines, dlqs
