"""The orphan sweep without reading the queues: its edges, against a real Redis broker
and real kombu messages (see :mod:`tidegate.integrations.celery.sweep_index` for the reasoning)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from structlog.testing import capture_logs

from tidegate.integrations.celery.broker import install_write_tolerant_broker
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sweep import OrphanSweep, track_publishes
from tidegate.load import DeliveryLedger, ParkingLot
from tidegate.load.outstanding import SEQ_HEADER, Outstanding, OutstandingUnit

TASK = "unit.sweep.push"


@pytest.fixture
def ctx(redis_url: str, redis_client: redis.Redis, prefix: str) -> Iterator[dict[str, Any]]:
    queue = f"{prefix}-q"
    app = Celery("sweep-edges", broker=redis_url, set_as_current=False)
    app.conf.broker_transport_options = {"unacked_key": f"{prefix}:unacked"}
    install_write_tolerant_broker(app)
    outstanding = Outstanding(redis_client, prefix=prefix)
    untrack = track_publishes([TASK], outstanding)
    broker = RedisDepthProbe(redis_client, unacked_key=f"{prefix}:unacked")
    sweep = OrphanSweep(
        app,
        outstanding,
        ledger=DeliveryLedger(redis_client, prefix=prefix),
        parking=ParkingLot(redis_client, prefix=prefix),
        broker=broker,
        interval_s=60,
    )
    try:
        yield {"app": app, "queue": queue, "outstanding": outstanding, "sweep": sweep}
    finally:
        untrack()
        redis_client.delete(*broker.list_keys(queue), f"{prefix}:unacked")
        app.close()


def _publish(ctx: dict[str, Any], keys: list[str], **options: Any) -> None:
    for key in keys:
        ctx["app"].send_task(
            TASK, args=[{"key": key, "body": "UNH+1'"}], queue=ctx["queue"], **options
        )


def _key_of(raw: bytes) -> str:
    return str(json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]["key"])


def _queued_keys(client: redis.Redis, names: list[str]) -> list[str]:
    return sorted(_key_of(raw) for name in names for raw in client.lrange(name, 0, -1))


def _sweeps(sweep: OrphanSweep, n: int) -> list[int]:
    with capture_logs():
        return [sweep.sweep_once() for _ in range(n)]


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_publish_carries_s0_and_is_indexed_under_a_later_s1(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    _publish(ctx, ["K1"])
    message = json.loads(redis_client.lindex(ctx["queue"], -1))
    s0 = int(message["headers"][SEQ_HEADER])
    out: Outstanding = ctx["outstanding"]
    s1 = redis_client.zscore(out.pushed_key(ctx["queue"]), "K1")
    assert s1 is not None
    assert s1 > s0
    assert redis_client.zcard(out.published_key(ctx["queue"])) == 0
    out.settle("K1")
    assert redis_client.zscore(out.pushed_key(ctx["queue"]), "K1") is None


def test_the_sweep_reads_no_queue_and_finds_only_the_lost_unit(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """2,000 queued and one popped-and-lost: no LRANGE, a few LINDEX, one republish."""
    keys = [f"B{i:04d}" for i in range(2_000)]
    with ctx["app"].connection_for_write() as conn:
        _publish(ctx, keys, connection=conn)
    lost = _key_of(redis_client.rpop(ctx["queue"]))
    lrange, lindex = _calls(redis_client, "lrange"), _calls(redis_client, "lindex")

    assert _sweeps(ctx["sweep"], 3) == [0, 1, 0]

    assert _calls(redis_client, "lrange") == lrange
    assert _calls(redis_client, "lindex") - lindex <= 3 * 4  # one per priority list
    assert _queued_keys(redis_client, [ctx["queue"]]) == keys
    assert lost == "B0000"


def test_priority_lists_bound_together(
    ctx: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    """Units in kombu's priority sub-lists: a unit lost from one list is found, the
    units queued in the others are not taken for lost."""
    sweep: OrphanSweep = ctx["sweep"]
    _publish(ctx, ["P0-a", "P0-b"])
    _publish(ctx, ["P9-a", "P9-b"], priority=9)
    names = sweep.broker.list_keys(ctx["queue"])
    high = next(n for n in names if redis_client.llen(n) and n != ctx["queue"])
    assert redis_client.llen(ctx["queue"]) == 2
    assert redis_client.llen(high) == 2
    lost = _key_of(redis_client.rpop(high))  # P9-a: popped from the high list, then lost

    assert _sweeps(sweep, 3) == [0, 1, 0]
    assert lost == "P9-a"
    assert _queued_keys(redis_client, names) == ["P0-a", "P0-b", "P9-a", "P9-b"]


def test_messages_kombu_restored_to_the_oldest_end_are_present(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """A visibility-timeout restore RPUSHes the message back, marked redelivered, ahead
    of newer ones: the head walk sees it (and bounds at the first message behind)."""
    _publish(ctx, ["R1", "R2", "R3"])
    restored = json.loads(redis_client.rpop(ctx["queue"]))  # R1, taken by a worker...
    restored["headers"]["redelivered"] = True
    redis_client.rpush(ctx["queue"], json.dumps(restored))  # ...and restored by kombu
    redis_client.rpop(ctx["queue"])  # R1 again: the restored copy taken, then lost
    redis_client.rpush(ctx["queue"], json.dumps(restored))  # restored once more
    assert _sweeps(ctx["sweep"], 3) == [0, 0, 0]
    assert _queued_keys(redis_client, [ctx["queue"]]) == ["R1", "R2", "R3"]


def test_a_message_requeued_at_the_newest_end_is_not_taken_for_lost(
    ctx: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    """A reject with requeue (a pool process lost) LPUSHes the message behind newer
    ones. Its unit's old s1 is below the head's s0; the broker's requeue hook gives it
    a new one, so it is not republished while it waits at the back."""
    _publish(ctx, ["Q1", "Q2", "Q3"])
    with ctx["app"].connection_for_read() as conn:
        message = conn.default_channel.basic_get(ctx["queue"], no_ack=False)
        assert message.payload[0][0]["key"] == "Q1"
        message.reject(requeue=True)
    assert _key_of(redis_client.lindex(ctx["queue"], 0)) == "Q1"  # at the newest end
    assert _sweeps(ctx["sweep"], 3) == [0, 0, 0]
    assert _queued_keys(redis_client, [ctx["queue"]]) == ["Q1", "Q2", "Q3"]


def test_a_head_without_a_sequence_skips_its_queue_until_it_is_consumed(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """An untracked producer's message at the head: nothing can be concluded, so no
    unit of that queue is judged (and the sweep says so); once it is consumed, the
    lost unit is found."""
    ctx["app"].send_task("unit.untracked", args=[{"x": 1}], queue=ctx["queue"])
    _publish(ctx, ["H1", "H2"])
    _publish(ctx, ["H3"])
    sweep: OrphanSweep = ctx["sweep"]
    # H1 lost: taken from behind the untracked head (as if that one had been re-queued).
    untracked = redis_client.rpop(ctx["queue"])
    assert _key_of(redis_client.rpop(ctx["queue"])) == "H1"
    redis_client.rpush(ctx["queue"], untracked)
    with capture_logs() as logs:
        assert [sweep.sweep_once() for _ in range(3)] == [0, 0, 0]
    skipped = [e for e in logs if e["event"] == "orphan_sweep_queue_skipped"]
    assert len(skipped) == 3
    assert skipped[0]["reason"] == "head_without_sequence"
    redis_client.rpop(ctx["queue"])  # the untracked message is consumed
    assert _sweeps(sweep, 3) == [0, 1, 0]
    assert _queued_keys(redis_client, [ctx["queue"]]) == ["H1", "H2", "H3"]


def test_a_publish_never_confirmed_is_stamped_by_the_second_sweep(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """The publisher died after recording (and maybe after LPUSH) but before confirming.
    The second sweep confirms both with the sequence it read at its start: neither is a
    candidate while a message published before that still waits (the queued one); once
    it is consumed, the lost one is found; the queued one was never taken for lost."""
    out: Outstanding = ctx["outstanding"]
    out.record(OutstandingUnit("U-lost", TASK, "t-lost", ctx["queue"], [{"key": "U-lost"}], {}))
    queued = OutstandingUnit("U-queued", TASK, "t-q", ctx["queue"], [{"key": "U-queued"}], {})
    s0 = out.record(queued)
    message = {"headers": {"id": "t-q", "task": TASK, SEQ_HEADER: s0}, "body": ""}
    redis_client.lpush(ctx["queue"], json.dumps(message))  # pushed, never confirmed

    assert _sweeps(ctx["sweep"], 4) == [0, 0, 0, 0]
    queued_now = out.get("U-queued")
    assert queued_now is not None
    assert queued_now.task_id == "t-q"
    assert redis_client.zscore(out.pushed_key(ctx["queue"]), "U-lost") is not None  # stamped
    redis_client.rpop(ctx["queue"])  # U-queued is taken by a worker
    out.settle("U-queued")  # and delivered
    assert _sweeps(ctx["sweep"], 2) == [0, 1]
    assert out.get("U-lost").task_id != "t-lost"


def test_records_of_an_older_version_are_indexed_once(
    ctx: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    """Records written without an index (an upgrade): the first armed sweep indexes
    them, leaving parked units out; a lost one is then found like any other."""
    out: Outstanding = ctx["outstanding"]
    for key in ("L-lost", "L-parked"):
        unit = OutstandingUnit(key, TASK, f"t-{key}", ctx["queue"], [{"key": key}], {})
        redis_client.hset(out.units_key, key, unit.to_json())  # the older version's write
    redis_client.sadd(out.queues_key, ctx["queue"])
    ParkingLot(redis_client, prefix=prefix).park(
        {"task": TASK, "args": [], "kwargs": {}, "queue": ctx["queue"], "key": "L-parked"},
        delay_s=600,
        reason="test",
    )
    with capture_logs() as logs:
        assert [ctx["sweep"].sweep_once() for _ in range(4)] == [0, 0, 1, 0]
    (indexed,) = [e for e in logs if e["event"] == "outstanding_indexed"]
    assert indexed["records"] == 1
    assert out.get("L-parked").task_id == "t-L-parked"
    assert _queued_keys(redis_client, [ctx["queue"]]) == ["L-lost"]


def test_a_new_registry_needs_no_indexing(ctx: dict[str, Any], redis_client: redis.Redis) -> None:
    _publish(ctx, ["N1"])
    assert redis_client.exists(ctx["outstanding"].indexed_key)


def test_the_sequence_never_goes_back_after_redis_loses_its_tail(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """A restart that lost the last writes of the append-only file can bring the
    counter back; the next sequence still exceeds every one handed out (Redis TIME)."""
    out: Outstanding = ctx["outstanding"]
    first = out.record(OutstandingUnit("S1", TASK, "t1", "q", [], {}))
    redis_client.set(out.seq_key, 5)  # the tail with the last increments is gone
    second = out.record(OutstandingUnit("S2", TASK, "t2", "q", [], {}))
    seconds, micros = redis_client.time()
    assert first < second <= seconds * 1_000_000 + micros
    out.settle("S1")
    out.settle("S2")
