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
from tidegate.load.memory import MemoryDeadLetterQueue, MemoryParkingLot, MemoryQuarantine
from tidegate.load.protocols import DeadLetterStore, ParkingStore, QuarantineStore

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
