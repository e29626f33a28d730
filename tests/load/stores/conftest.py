"""The store table: every behaviour test runs on the memory twin and on a real Redis.

Both get the same :class:`~tidegate.flow.backends.memory.ManualClock` (the Redis
stores pass its time to their scripts as ``now_ms``), so a lease expires, a replay mark
lapses or a record ages because the test moved the clock — never because it slept.
``other_*`` is a second handle onto the same store, as a second process has it: a new
client for Redis, the same object for memory (one process is all a memory store has).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tidegate._redis import client_from_url
from tidegate.flow.backends.memory import ManualClock
from tidegate.load import DeadLetterQueue, ParkingLot, Quarantine
from tidegate.load.board import LoadBoard
from tidegate.load.ledger import DeliveryLedger
from tidegate.load.levels import Watermarks
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
from tidegate.load.protocols import (
    DeadLetterStore,
    LedgerStore,
    LoadBoardStore,
    OutstandingStore,
    ParkingStore,
    QuarantineStore,
    WatermarkConfigStore,
)
from tidegate.load.watermark_store import WatermarkStore

#: Ledger entries live this long in the suite (s): short enough to cross on the clock.
LEDGER_TTL_S = 120

STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
]


@pytest.fixture
def clock() -> ManualClock:
    """The test's clock, near the real epoch (failure times are Unix seconds)."""
    return ManualClock(start_ms=1_700_000_000_000.0)


@pytest.fixture(params=STORES)
def store_backend(request: pytest.FixtureRequest) -> str:
    """``"memory"`` or ``"redis"``: which implementation this run of a test uses."""
    return str(request.param)


@pytest.fixture
def second_client(
    store_backend: str, request: pytest.FixtureRequest
) -> Iterator[redis.Redis | None]:
    """Another Redis connection (a second process's), or None for memory."""
    if store_backend == "memory":
        yield None
        return
    client = client_from_url(request.getfixturevalue("redis_url"))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def parking(store_backend: str, clock: ManualClock, request: pytest.FixtureRequest) -> ParkingStore:
    if store_backend == "memory":
        return MemoryParkingLot(clock=clock.now_ms)
    client = request.getfixturevalue("redis_client")
    return ParkingLot(client, prefix=request.getfixturevalue("prefix"), clock=clock.now_ms)


@pytest.fixture
def other_parking(
    parking: ParkingStore, second_client: redis.Redis | None, clock: ManualClock, prefix: str
) -> ParkingStore:
    if second_client is None:
        return parking
    return ParkingLot(second_client, prefix=prefix, clock=clock.now_ms)


@pytest.fixture
def quarantine(
    store_backend: str, clock: ManualClock, request: pytest.FixtureRequest
) -> QuarantineStore:
    if store_backend == "memory":
        return MemoryQuarantine(clock=clock.now_ms)
    client = request.getfixturevalue("redis_client")
    return Quarantine(client, prefix=request.getfixturevalue("prefix"), clock=clock.now_ms)


@pytest.fixture
def other_quarantine(
    quarantine: QuarantineStore,
    second_client: redis.Redis | None,
    clock: ManualClock,
    prefix: str,
) -> QuarantineStore:
    if second_client is None:
        return quarantine
    return Quarantine(second_client, prefix=prefix, clock=clock.now_ms)


@pytest.fixture
def dlq(store_backend: str, clock: ManualClock, request: pytest.FixtureRequest) -> DeadLetterStore:
    if store_backend == "memory":
        return MemoryDeadLetterQueue(clock=clock.now_ms)
    client = request.getfixturevalue("redis_client")
    return DeadLetterQueue(client, prefix=request.getfixturevalue("prefix"), clock=clock.now_ms)


@pytest.fixture
def other_dlq(
    dlq: DeadLetterStore, second_client: redis.Redis | None, clock: ManualClock, prefix: str
) -> DeadLetterStore:
    if second_client is None:
        return dlq
    return DeadLetterQueue(second_client, prefix=prefix, clock=clock.now_ms)


@pytest.fixture
def ledger(store_backend: str, clock: ManualClock, request: pytest.FixtureRequest) -> LedgerStore:
    """A delivery ledger on the shared manual clock."""
    if store_backend == "memory":
        return MemoryLedger(ttl_s=LEDGER_TTL_S, clock=clock.now_ms)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return DeliveryLedger(client, prefix=prefix, ttl_s=LEDGER_TTL_S, clock=clock.now_ms)


@pytest.fixture
def watermark_store(store_backend: str, request: pytest.FixtureRequest) -> WatermarkConfigStore:
    """The live watermarks, with defaults hwm=1000, lwm=100, shed_after=3."""
    defaults = Watermarks(hwm=1000, lwm=100, shed_after=3)
    if store_backend == "memory":
        return MemoryWatermarkStore(defaults=defaults)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return WatermarkStore(client, prefix=prefix, defaults=defaults)


@pytest.fixture
def board(store_backend: str, clock: ManualClock, request: pytest.FixtureRequest) -> LoadBoardStore:
    """The load board on the shared manual clock."""
    if store_backend == "memory":
        return MemoryLoadBoard(clock=clock.now_ms)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return LoadBoard(client, prefix=prefix, clock=clock.now_ms)


@pytest.fixture
def outstanding(
    store_backend: str, clock: ManualClock, request: pytest.FixtureRequest
) -> OutstandingStore:
    """The registry of outstanding units on the shared manual clock."""
    if store_backend == "memory":
        return MemoryOutstanding(clock=clock.now_ms)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return Outstanding(client, prefix=prefix, clock=clock.now_ms)
