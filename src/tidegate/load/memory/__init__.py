"""One-process twins of the ``load/`` stores: the same behaviour as the Redis stores,
in dicts under a lock, on an injectable clock.

Useful on their own for a single process (a script, a test of a caller) and as the
fakes the behaviour suites under ``tests/load/stores/`` hold to the Redis stores'
word: every test there runs on both. State lives in the object; two twins share
nothing, as two Redis servers would not.
"""

from __future__ import annotations

from tidegate.load.memory.ledger import MemoryLedger
from tidegate.load.memory.outstanding import MemoryOutstanding
from tidegate.load.memory.watermarks import MemoryLoadBoard, MemoryWatermarkStore

__all__ = ["MemoryLedger", "MemoryLoadBoard", "MemoryOutstanding", "MemoryWatermarkStore"]
