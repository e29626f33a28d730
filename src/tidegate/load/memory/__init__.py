"""Memory twins of the ``tidegate.load`` stores: one process, one lock, no Redis.

Each twin keeps what its Redis store keeps, in dicts under a lock (as dramatiq's stub
backend does), and passes the same behaviour suite (``tests/load/stores/``) on a
shared manual clock. Use them where one process is the whole system — a script, the
in-memory lifecycle engine, tests of code built on a store; a fleet shares its state
through Redis. The contracts are in :mod:`tidegate.load.protocols`.
"""

from __future__ import annotations

from tidegate.load.memory.dlq import MemoryDeadLetterQueue
from tidegate.load.memory.parking import MemoryParkingLot
from tidegate.load.memory.quarantine import MemoryQuarantine

__all__ = ["MemoryDeadLetterQueue", "MemoryParkingLot", "MemoryQuarantine"]
