"""DLQ replay marks in Redis's keys: what the behaviour suite cannot see.

The behaviour of replays (marks taken atomically, skipped by a second replay, ended
by settling or by lapsing) runs on Redis and the memory twin in
``tests/load/stores/test_dlq_behaviour.py``; this pins where the Redis queue keeps its
marks, through the one keyspace.
"""

from __future__ import annotations

import pytest
import redis

from tidegate.keys import Keyspace
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.replay import replay_dead_letters

pytestmark = pytest.mark.redis


def test_marks_live_in_the_keyspace_and_settling_removes_them(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The mark is a member of ``{dlq}:replaying`` with its count in ``{dlq}:replays``;
    a delivered unit's remove leaves neither behind."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    keys = Keyspace(prefix).dlq()
    dlq.add(DeadLetter(key="k", task="t", reason="HTTP 422"))

    replay_dead_letters(dlq, lambda letter: None, limit=1)
    marked = (redis_client.zcard(keys.replaying), redis_client.hget(keys.replays, "k"))
    dlq.remove("k")

    assert marked == (1, b"1")
    assert redis_client.zcard(keys.replaying) == 0
    assert not redis_client.hexists(keys.replays, "k")
    assert not redis_client.exists(keys.records, keys.order)
