"""The live watermarks and the load board, against a real Redis.

(The quarantine's own behaviour runs on Redis and its memory twin in
``tests/load/stores/test_quarantine_behaviour.py``.)
"""

from __future__ import annotations

import pytest
import redis

from tidegate.errors import ConfigurationError
from tidegate.load.depth import QueueDepth
from tidegate.load.watermarks import (
    BoardEntry,
    LoadBoard,
    LoadState,
    Watermarks,
    WatermarkStore,
    advance,
)

pytestmark = pytest.mark.redis


def test_watermarks_are_retuned_live_and_validated(redis_client: redis.Redis, prefix: str) -> None:
    """Redis overrides win over the environment's defaults; per queue over global;
    an invalid retune raises with the values and stores nothing."""
    store = WatermarkStore(redis_client, prefix=prefix, defaults=Watermarks(hwm=1000, lwm=100))
    store.configure(hwm=500)
    store.configure(queue="edi.customs", lwm=300)
    assert store.get() == Watermarks(hwm=500, lwm=100)
    assert store.get("edi.customs") == Watermarks(hwm=500, lwm=300)
    with pytest.raises(ConfigurationError, match="QUEUE_LWM=600 QUEUE_HWM=500"):
        store.configure(queue="edi.tos", lwm=600)
    with pytest.raises(ConfigurationError, match="QUEUE_LWM=300 QUEUE_HWM=200"):
        store.configure(hwm=200)  # global change that would break edi.customs' override
    with pytest.raises(ConfigurationError, match="nothing to change"):
        store.configure()
    assert store.overrides() == {"hwm": 500.0, "lwm@edi.customs": 300.0}
    store.reset("edi.customs")
    assert store.get("edi.customs") == Watermarks(hwm=500, lwm=100)


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
