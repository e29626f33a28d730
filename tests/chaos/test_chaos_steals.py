"""What ``kill-workers`` takes off the broker, and what the orphan sweep owes for it.

The full-size run of 2026-12-02 failed ``lost_messages_swept_back`` 8 ≠ 9: the check
counted every taken message as a loss the sweep had to give back, matched by task id.
A taken message can be a stale copy: its unit is settled already, or its record names
another message, or a copy of it is still in ``unacked``. The sweep rightly leaves
those alone. Real Redis, real kombu messages published and tracked as the fleet
publishes them, taken with the scenario's own ``_steal_one``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis
from celery import Celery

from tidegate.harness.chaos import preset
from tidegate.harness.chaos.kill_workers import _KillWorkers
from tidegate.harness.chaos.steals import (
    COPY_IN_UNACKED,
    OWED,
    SETTLED,
    SUPERSEDED,
    swept_back,
)
from tidegate.integrations.celery.sweep import track_publishes
from tidegate.load.outstanding import Outstanding
from tidegate.logging import key_hash

TASK = "edi.tos.push"


@pytest.fixture
def ctx(redis_url: str, redis_client: redis.Redis, prefix: str) -> Iterator[dict[str, Any]]:
    pool = f"{prefix}-tos"  # the scenario takes from ``edi.<pool>``
    queue = f"edi.{pool}"
    app = Celery("steals", broker=redis_url, set_as_current=False)
    outstanding = Outstanding(redis_client, prefix=prefix)
    untrack = track_publishes([TASK], outstanding, app=app)
    try:
        yield {"app": app, "pool": pool, "queue": queue, "outstanding": outstanding}
    finally:
        untrack()
        redis_client.delete(queue)
        app.close()


def _publish(ctx: dict[str, Any], key: str) -> None:
    ctx["app"].send_task(TASK, args=[{"key": f"{key}", "body": "UNH+1'"}], queue=ctx["queue"])


def _take(scenario: _KillWorkers, client: redis.Redis, prefix: str, pool: str) -> str:
    run = SimpleNamespace(client=client, prefix=prefix)
    scenario._steal_one(cast("Any", run), pool, 1.0)
    return scenario.stolen[-1].state


def test_only_the_only_carrier_of_an_unsettled_unit_is_owed(
    ctx: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    scenario = _KillWorkers(preset("kill-workers", "test"), None)
    out: Outstanding = ctx["outstanding"]
    pool, queue = ctx["pool"], ctx["queue"]
    keys = {name: f"{prefix}-{name}" for name in ("lost", "settled", "stale", "copy")}

    _publish(ctx, keys["lost"])
    assert _take(scenario, redis_client, prefix, pool) == OWED

    # Delivered before the take (its registry record settled): a stale copy.
    _publish(ctx, keys["settled"])
    out.settle(keys["settled"])
    assert _take(scenario, redis_client, prefix, pool) == SETTLED

    # Published again under a new message (as the sweep or the mover do): the older
    # message, taken, was not the one the unit waits on.
    _publish(ctx, keys["stale"])
    _publish(ctx, keys["stale"])
    assert _take(scenario, redis_client, prefix, pool) == SUPERSEDED
    redis_client.delete(queue)

    # A copy of the same message is held in kombu's unacked hash (a main's prefetch).
    _publish(ctx, keys["copy"])
    raw = cast("bytes", redis_client.lindex(queue, -1))
    tag = f"{prefix}-tag"
    redis_client.hset("unacked", tag, json.dumps([json.loads(raw), "", queue]))
    try:
        assert _take(scenario, redis_client, prefix, pool) == COPY_IN_UNACKED
    finally:
        redis_client.hdel("unacked", tag)

    # The sweep republished the lost unit (under a new task id, logged by key_hash),
    # and one unit no take explains.
    republished = [
        {"key_hash": key_hash(keys["lost"]), "lost_task_id": "whatever-the-record-said"},
        {"key_hash": key_hash(f"{prefix}-other"), "lost_task_id": "x"},
    ]
    assert not any(m.redelivered for m in scenario.stolen)  # fresh publishes, no restore
    back = swept_back(scenario.stolen, republished)
    assert back.taken == 4
    assert back.owed == 1
    assert back.swept_back == 1
    assert back.not_owed == {SETTLED: 1, SUPERSEDED: 1, COPY_IN_UNACKED: 1}
    assert back.other_republished == 1
    # What the report keeps of a take: its unit's hash, never the key.
    taken = [m.as_dict() for m in scenario.stolen]
    assert all(keys["lost"] not in json.dumps(m) for m in taken)


def test_an_owed_unit_not_republished_fails_the_match() -> None:
    from tidegate.harness.chaos.steals import TakenMessage

    taken = [TakenMessage(1.0, "tos", "id-1", "h1", OWED)]
    back = swept_back(taken, [{"key_hash": "h2"}])
    assert (back.owed, back.swept_back, back.other_republished) == (1, 0, 1)


def test_an_owed_unit_delivered_by_another_copy_is_told_apart_from_a_loss() -> None:
    """A take can look like the only carrier while a live worker still runs a copy kombu
    restored (its ``unacked`` entry already gone). Delivered all the same, that unit is
    counted as delivered by a copy; an owed unit neither republished nor delivered is
    in neither count, so the check still fails for a real loss."""
    from tidegate.harness.chaos.steals import TakenMessage

    taken = [
        TakenMessage(1.0, "tos", "id-1", "h1", OWED),
        TakenMessage(2.0, "tos", "id-2", "h2", OWED),
        TakenMessage(3.0, "tos", "id-3", "h3", OWED),
    ]
    back = swept_back(taken, [{"key_hash": "h1"}], delivered=["h1", "h2", "h9"])
    assert (back.owed, back.swept_back, back.delivered_by_a_copy) == (3, 1, 1)
    assert back.swept_back + back.delivered_by_a_copy < back.owed  # h3: a real loss
