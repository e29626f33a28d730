"""The backend table of the ledger, outstanding and watermark behaviour suites.

Every test that takes one of these fixtures runs twice: on the memory twin and on the
Redis store against the embedded redis-server (``redis_client`` from
``tests/conftest.py``), both on one :class:`ManualClock` — the Redis stores get it as
``clock=`` and pass its time to their scripts, so the same deterministic test exercises
the real Lua in a real server without a single real sleep.

A test module binds the fixtures it uses to module names (pytest finds fixtures in the
module's globals): ``clock, ledger = _backends_b.clock, _backends_b.ledger``.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tidegate.flow.backends import ManualClock
from tidegate.keys import Keyspace
from tidegate.load.board import LoadBoard, LoadBoardStore
from tidegate.load.ledger import DeliveryLedger, LedgerStore
from tidegate.load.levels import Watermarks
from tidegate.load.memory import (
    MemoryLedger,
    MemoryLoadBoard,
    MemoryOutstanding,
    MemoryWatermarkStore,
)
from tidegate.load.outstanding import Outstanding, OutstandingStore
from tidegate.load.watermark_store import WatermarkConfigStore, WatermarkStore

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
]

#: Ledger entries live this long in the suite (s): short enough to cross on the clock.
LEDGER_TTL_S = 120


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_700_000_000_000.0)


@pytest.fixture(params=BACKENDS)
def ledger(request: pytest.FixtureRequest, clock: ManualClock) -> LedgerStore:
    """A delivery ledger on the shared manual clock."""
    if request.param == "memory":
        return MemoryLedger(ttl_s=LEDGER_TTL_S, clock=clock.now_ms)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return DeliveryLedger(client, prefix=prefix, ttl_s=LEDGER_TTL_S, clock=clock.now_ms)


def expires_in_s(store: Any, downstream: str, key: str) -> float | None:
    """Seconds until ``key``'s ledger entry is forgotten, ``None`` without one.

    The Redis store's TTL runs on the server's clock, not the manual one, so the suite
    reads it (``PTTL``) rather than advancing the clock past it.
    """
    if isinstance(store, MemoryLedger):
        return store.expires_in_s(downstream, key)
    ms = store.client.pttl(Keyspace(store.prefix).delivered(downstream, key))
    return None if ms < 0 else ms / 1000.0


@pytest.fixture(params=BACKENDS)
def watermark_store(request: pytest.FixtureRequest) -> WatermarkConfigStore:
    """The live watermarks, with defaults hwm=1000, lwm=100, shed_after=3."""
    defaults = Watermarks(hwm=1000, lwm=100, shed_after=3)
    if request.param == "memory":
        return MemoryWatermarkStore(defaults=defaults)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return WatermarkStore(client, prefix=prefix, defaults=defaults)


@pytest.fixture(params=BACKENDS)
def board(request: pytest.FixtureRequest, clock: ManualClock) -> LoadBoardStore:
    """The load board on the shared manual clock."""
    if request.param == "memory":
        return MemoryLoadBoard(clock=clock.now_ms)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return LoadBoard(client, prefix=prefix, clock=clock.now_ms)


@pytest.fixture(params=BACKENDS)
def outstanding(request: pytest.FixtureRequest, clock: ManualClock) -> OutstandingStore:
    """The registry of outstanding units on the shared manual clock."""
    if request.param == "memory":
        return MemoryOutstanding(clock=clock.now_ms)
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("prefix")
    return Outstanding(client, prefix=prefix, clock=clock.now_ms)
