"""Memory twins of the ``tidegate.load`` stores: one process, one lock, no Redis.

Each twin keeps what its Redis store keeps, in dicts under a lock (as dramatiq's stub
backend does), on an injectable clock, and passes the same behaviour suite
(``tests/load/stores/``) on a shared manual clock. Use them where one process is the
whole system — a script, the in-memory lifecycle engine, tests of code built on a
store; a fleet shares its state through Redis, and two twins share nothing, as two
Redis servers would not. The contracts are in :mod:`tidegate.load.protocols`.
"""

from __future__ import annotations

from tidegate.load.memory.dlq import MemoryDeadLetterQueue
from tidegate.load.memory.ledger import MemoryLedger
from tidegate.load.memory.outstanding import MemoryOutstanding
from tidegate.load.memory.parking import MemoryParkingLot
from tidegate.load.memory.quarantine import MemoryQuarantine
from tidegate.load.memory.watermarks import MemoryLoadBoard, MemoryWatermarkStore

__all__ = [
    "MemoryDeadLetterQueue",
    "MemoryLedger",
    "MemoryLoadBoard",
    "MemoryOutstanding",
    "MemoryParkingLot",
    "MemoryQuarantine",
    "MemoryWatermarkStore",
]
