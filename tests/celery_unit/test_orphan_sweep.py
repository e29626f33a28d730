"""The orphan sweep against a real Redis broker: a message popped and never recorded
in ``unacked`` (a worker main process SIGKILLed between the two) is given back."""

from __future__ import annotations

import base64
import contextlib
import json
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from structlog.testing import capture_logs

from tidegate._redis import client_from_url
from tidegate.errors import ConfigurationError
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sweep import OrphanSweep, track_publishes
from tidegate.load import DeliveryLedger, ParkingLot
from tidegate.load.outstanding import Outstanding, OutstandingUnit, find_orphans
from tidegate.logging import key_hash
from tidegate.redis_server import EmbeddedRedis

TASK = "unit.sweep.push"


def _unit(key: str, task_id: str = "t-1", queue: str = "q") -> OutstandingUnit:
    return OutstandingUnit(key, TASK, task_id, queue, [{"key": key}], {})


def _pushed_and_lost(outstanding: Outstanding, unit: OutstandingUnit) -> None:
    """A unit whose publish was recorded and confirmed, and whose message is nowhere."""
    s0 = outstanding.record(unit)
    assert outstanding.pushed(unit.key, unit.queue, s0) > 0


def test_find_orphans_needs_consecutive_misses() -> None:
    units = [_unit("A", "ta"), _unit("B", "tb"), _unit("C", "tc"), _unit("D", "td")]
    verdict = find_orphans(
        units,
        present_task_ids={"ta"},
        parked_keys={"B"},
        misses={"C": 1, "A": 1},
        threshold=2,
    )
    assert [u.key for u in verdict.orphans] == ["C"]  # missing twice in a row
    assert verdict.misses == {"D": 1}  # missing once; A and B are present
    with pytest.raises(ConfigurationError):
        find_orphans(units, present_task_ids=set(), parked_keys=set(), misses={}, threshold=0)


@contextlib.contextmanager
def _sweeping(url: str, client: redis.Redis, prefix: str) -> Iterator[dict[str, Any]]:
    """An app publishing tracked units to ``{prefix}-q`` on the Redis at ``url``, and
    the orphan sweep over it (tidegate's stores on the same server)."""
    queue = f"{prefix}-q"
    app = Celery("sweep-unit", broker=url, set_as_current=False)
    outstanding = Outstanding(client, prefix=prefix)
    untrack = track_publishes([TASK], outstanding)
    sweep = OrphanSweep(
        app,
        outstanding,
        ledger=DeliveryLedger(client, prefix=prefix),
        parking=ParkingLot(client, prefix=prefix),
        broker=RedisDepthProbe(client, unacked_key=f"{prefix}:unacked"),
        interval_s=60,
    )
    try:
        yield {"app": app, "queue": queue, "outstanding": outstanding, "sweep": sweep}
    finally:
        untrack()
        app.close()


@pytest.fixture
def ctx(redis_url: str, redis_client: redis.Redis, prefix: str) -> Iterator[dict[str, Any]]:
    with _sweeping(redis_url, redis_client, prefix) as made:
        try:
            yield made
        finally:
            redis_client.delete(made["queue"], f"{prefix}:unacked")


def _publish(ctx: dict[str, Any], keys: list[str]) -> None:
    for key in keys:
        ctx["app"].send_task(TASK, args=[{"key": key, "body": "UNH+1'"}], queue=ctx["queue"])


def _queued_keys(client: redis.Redis, queue: str) -> list[str]:
    keys = []
    for raw in client.lrange(queue, 0, -1):
        body = json.loads(base64.b64decode(json.loads(raw)["body"]))
        keys.append(body[0][0]["key"])
    return sorted(keys)


def test_publishes_are_recorded_with_their_message_id(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    _publish(ctx, ["K1", "K2"])
    unit = ctx["outstanding"].get("K1")
    assert unit is not None
    assert (unit.task, unit.queue, unit.args[0]["key"]) == (TASK, ctx["queue"], "K1")
    ids = {json.loads(raw)["headers"]["id"] for raw in redis_client.lrange(ctx["queue"], 0, -1)}
    assert unit.task_id in ids
    ctx["outstanding"].settle("K1")
    assert ctx["outstanding"].get("K1") is None
    assert len(ctx["outstanding"]) == 1


def test_a_message_lost_between_brpop_and_unacked_is_republished_once(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    _publish(ctx, ["K1", "K2", "K3"])
    lost = json.loads(redis_client.rpop(ctx["queue"]))  # popped, then the process died
    lost_key = {"K1", "K2", "K3"} - set(_queued_keys(redis_client, ctx["queue"]))
    sweep: OrphanSweep = ctx["sweep"]

    assert sweep.sweep_once() == 0  # missing once: could be in flight between two reads
    with capture_logs() as logs:
        assert sweep.sweep_once() == 1
        assert sweep.sweep_once() == 0  # back in the queue: present again

    assert _queued_keys(redis_client, ctx["queue"]) == ["K1", "K2", "K3"]
    (event,) = [e for e in logs if e["event"] == "orphan_republished"]
    (lost_one,) = lost_key
    assert event["key_hash"] == key_hash(lost_one)
    assert event["lost_task_id"] == lost["headers"]["id"]
    assert ctx["outstanding"].get(lost_one).task_id == event["task_id"]


def test_messages_in_unacked_or_parked_are_not_orphans(
    ctx: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    _publish(ctx, ["K1", "K2"])
    # K-a: delivered to a worker (kombu moved it to unacked); K-b: parked by its task.
    first = redis_client.rpop(ctx["queue"])
    redis_client.hset(f"{prefix}:unacked", "tag-1", json.dumps([json.loads(first), "", "q"]))
    second = json.loads(redis_client.rpop(ctx["queue"]))
    key = json.loads(base64.b64decode(second["body"]))[0][0]["key"]
    ParkingLot(redis_client, prefix=prefix).park(
        {"task": TASK, "args": [], "kwargs": {}, "queue": ctx["queue"], "key": key},
        delay_s=600,
        reason="test",
    )
    ctx["outstanding"].hold(key)  # what GatedTask does after parking
    for _ in range(3):
        assert ctx["sweep"].sweep_once() == 0


def test_a_delivered_unit_with_a_stale_record_is_settled_not_republished(
    ctx: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    """The settle after delivery failed (Redis blinked): the ledger knows better."""
    _pushed_and_lost(ctx["outstanding"], _unit("K9", "gone"))
    DeliveryLedger(redis_client, prefix=prefix).mark("", "K9")
    ctx["sweep"].sweep_once()
    assert ctx["sweep"].sweep_once() == 0
    assert ctx["outstanding"].get("K9") is None
    assert redis_client.llen(ctx["queue"]) == 0


def test_one_worker_of_the_fleet_sweeps_per_interval(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    sweep: OrphanSweep = ctx["sweep"]
    other = OrphanSweep(
        ctx["app"],
        ctx["outstanding"],
        ledger=sweep.ledger,
        parking=sweep.parking,
        broker=sweep.broker,
        interval_s=60,
    )
    _pushed_and_lost(ctx["outstanding"], _unit("K5", "nowhere"))
    ctx["outstanding"].arm(3)
    sweep.maybe_sweep(now=1000.0)
    other.maybe_sweep(now=1000.0)  # the fleet's turn is taken: no second count
    misses = redis_client.hgetall(ctx["outstanding"].misses_key)
    assert misses == {b"K5": b"1"}


def test_an_unarmed_sweep_reads_nothing(ctx: dict[str, Any], redis_client: redis.Redis) -> None:
    """No worker died: nothing can be lost, so the backlog is not read at all."""
    _publish(ctx, ["K1", "K2"])
    ctx["outstanding"].record(_unit("K5", "nowhere"))
    sweep: OrphanSweep = ctx["sweep"]
    assert [sweep.maybe_sweep(now=1000.0 + 61 * i) for i in range(4)] == [0, 0, 0, 0]
    assert redis_client.hgetall(ctx["outstanding"].misses_key) == {}
    assert not redis_client.exists(ctx["outstanding"].present_key)


def test_a_death_sweeps_a_lost_unit_back_through_maybe_sweep(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """End to end in one process: beat, death, armed sweeps, republish, disarmed."""
    _publish(ctx, ["K1", "K2"])
    redis_client.rpop(ctx["queue"])  # popped by the worker that then died
    outstanding: Outstanding = ctx["outstanding"]
    outstanding.beat("dead-worker", dead_after_s=10, arm_sweeps=3, now_ms=1_000)
    sweep: OrphanSweep = ctx["sweep"]
    results = []
    with capture_logs() as logs:
        for i in range(5):
            results.append(sweep.maybe_sweep(now=1000.0 + 61 * i))
            redis_client.delete(outstanding.lock_key)  # the interval passes for the fleet too
    assert results == [0, 1, 0, 0, 0]  # four sweeps armed: misses + 2
    assert _queued_keys(redis_client, ctx["queue"]) == ["K1", "K2"]
    events = [e["event"] for e in logs]
    assert events.count("orphan_sweep_armed") == 1
    assert events.count("orphan_republished") == 1
    assert not redis_client.exists(outstanding.armed_key, outstanding.misses_key)


def test_pages_smaller_than_the_backlog_find_exactly_the_lost_units(
    ctx: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    """53 units read 7 at a time: the 3 lost ones come back, the 50 queued stay put."""
    keys = [f"P{i:02d}" for i in range(53)]
    _publish(ctx, keys)
    for _ in range(3):
        redis_client.rpop(ctx["queue"])
    sweep: OrphanSweep = ctx["sweep"]
    small = OrphanSweep(
        ctx["app"],
        ctx["outstanding"],
        ledger=sweep.ledger,
        parking=sweep.parking,
        broker=sweep.broker,
        interval_s=60,
        page=7,
    )
    with capture_logs():
        assert [small.sweep_once() for _ in range(3)] == [0, 3, 0]
    assert _queued_keys(redis_client, ctx["queue"]) == keys


def test_the_sweep_holds_a_page_not_the_backlog(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """Python memory at the sweep's peak is a small fraction of the queued bytes.

    The sweep used to read every queued message and every record at once: its peak
    was several times the backlog's own size.
    """
    filler = "x" * 2_000
    with ctx["app"].connection_for_write() as conn:
        for i in range(4_000):
            ctx["app"].send_task(
                TASK,
                args=[{"key": f"M{i}", "body": filler}],
                queue=ctx["queue"],
                connection=conn,
            )
    queued = sum(len(raw) for raw in redis_client.lrange(ctx["queue"], 0, -1))
    sweep = OrphanSweep(
        ctx["app"],
        ctx["outstanding"],
        ledger=ctx["sweep"].ledger,
        parking=ctx["sweep"].parking,
        broker=ctx["sweep"].broker,
        page=100,
    )
    tracemalloc.start()
    try:
        assert sweep.sweep_once() == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert queued > 8_000_000
    assert peak < queued / 10, f"peak {peak} B for {queued} B queued"


def test_invalid_sweep_settings(ctx: dict[str, Any], redis_client: redis.Redis) -> None:
    for kwargs in ({"interval_s": 0}, {"misses": 0}):
        with pytest.raises(ConfigurationError):
            OrphanSweep(
                ctx["app"],
                ctx["outstanding"],
                ledger=ctx["sweep"].ledger,
                parking=ctx["sweep"].parking,
                broker=ctx["sweep"].broker,
                **kwargs,  # type: ignore[arg-type]
            )


def test_no_sweep_for_an_amqp_broker(redis_client: redis.Redis) -> None:
    app = Celery("amqp", broker="amqp://guest@127.0.0.1//", set_as_current=False)
    outstanding = Outstanding(redis_client, prefix=f"x-{uuid.uuid4().hex[:6]}")
    assert (
        OrphanSweep.for_app(
            app,
            outstanding,
            ledger=DeliveryLedger(redis_client),
            parking=ParkingLot(redis_client),
        )
        is None
    )


def test_a_broker_key_prefix_is_honoured(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """kombu's global_keyprefix moves the queue lists: the sweep must look there, or it
    would take every queued unit for an orphan."""
    options = {"global_keyprefix": f"{prefix}-gp:"}
    app = Celery("sweep-gp", broker=redis_url, set_as_current=False)
    app.conf.broker_transport_options = options
    outstanding = Outstanding(redis_client, prefix=prefix)
    untrack = track_publishes([TASK], outstanding)
    try:
        app.send_task(TASK, args=[{"key": "GP-1"}], queue=f"{prefix}-q")
        assert redis_client.llen(f"{prefix}-gp:{prefix}-q") == 1
        sweep = OrphanSweep.for_app(
            app,
            outstanding,
            ledger=DeliveryLedger(redis_client, prefix=prefix),
            parking=ParkingLot(redis_client, prefix=prefix),
        )
        assert sweep is not None
        assert [sweep.sweep_once() for _ in range(3)] == [0, 0, 0]
    finally:
        untrack()
        redis_client.delete(f"{prefix}-gp:{prefix}-q")
        app.close()


def test_a_broker_restart_arms_the_sweep_that_gives_a_lost_pop_back(prefix: str) -> None:
    """Redis wrote a ``BRPOP``'s pop to its append-only file and died before the worker
    read the answer: the message is in no list and not in ``unacked``, and no worker
    died (``tidegate demo --chaos redis-restart`` lost one so, once in about a dozen
    runs). The server's new ``run_id`` arms the sweep, which gives it back."""
    server = EmbeddedRedis(appendonly=True).start()
    client = client_from_url(server.url)
    try:
        with _sweeping(server.url, client, prefix) as made:
            queue, outstanding, sweep = made["queue"], made["outstanding"], made["sweep"]
            _publish(made, ["K1", "K2"])
            assert sweep.maybe_sweep(now=1000.0) == 0  # a beat: this run of the server noted
            client.delete(outstanding.lock_key)
            size = server.aof_size()
            client.rpop(queue)  # the pop whose answer never reached the worker
            assert server.aof_grown(size) > size  # the kill must not lose the pop
            server.kill()
            server.start()

            results = []
            with capture_logs() as logs:
                for i in range(1, 6):
                    results.append(sweep.maybe_sweep(now=1000.0 + 61 * i))
                    client.delete(outstanding.lock_key)  # the interval passes for the fleet
            assert results == [0, 1, 0, 0, 0]  # missing twice, republished, then present
            assert _queued_keys(client, queue) == ["K1", "K2"]
            armed = [e for e in logs if e["event"] == "orphan_sweep_armed"]
            assert [(e["reason"], e["sweeps"]) for e in armed] == [("broker_restarted", 4)]
    finally:
        client.close()
        server.stop()
