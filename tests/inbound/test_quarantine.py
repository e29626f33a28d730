"""The load board against a real Redis. (The quarantine's and the live watermarks'
behaviour runs on Redis and on their memory twins in ``tests/load/stores/``.)
"""

from __future__ import annotations

import pytest
import redis

from tidegate.load.depth import QueueDepth
from tidegate.load.watermarks import (
    BoardEntry,
    LoadBoard,
    LoadState,
    Watermarks,
    advance,
)

pytestmark = pytest.mark.redis


def test_the_board_carries_the_state_and_its_age(redis_client: redis.Redis, prefix: str) -> None:
    """What the monitor publishes is read back whole, aged on the Redis clock."""
    board = LoadBoard(redis_client, prefix=prefix)
    marks = Watermarks(hwm=10, lwm=2, shed_after=1)
    state = advance(LoadState("q"), 50, marks)
    now = board.now_ms()
    board.publish([BoardEntry(state, QueueDepth("q", 45, 5), marks, None, now - 4000, 1.0)])
    entry = board.read(["q", "absent"])["q"]
    assert entry.state == state
    assert (entry.depth.ready, entry.depth.unacked) == (45, 5)
    assert 4.0 <= entry.age_s < 10
    assert not entry.fresh()  # 4 s old with a 1 s interval: stale
    assert board.read() == {"q": entry}
