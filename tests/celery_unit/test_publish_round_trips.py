"""A tracked publish costs one Redis script, not two, when tidegate's Redis is the
broker's: record (s0), LPUSH and confirm (s1) run as one script from tidegate's broker
channel, and what is recorded is what the separate calls record. Real Redis, real kombu
messages; commands counted with ``INFO commandstats`` (scripts' inner commands are
counted under their own names, so EVAL/EVALSHA calls are the round trips that ran a
script)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from tidegate.integrations.celery.broker import install_write_tolerant_broker
from tidegate.integrations.celery.sweep import track_publishes
from tidegate.load.outstanding import LANE_HEADER, SEQ_HEADER, Outstanding

TASK = "unit.publish.push"


@pytest.fixture
def ctx(redis_url: str, redis_client: redis.Redis, prefix: str) -> Iterator[dict[str, Any]]:
    queue = f"{prefix}-q"
    app = Celery("publish-cost", broker=redis_url, set_as_current=False)
    install_write_tolerant_broker(app)
    outstanding = Outstanding(redis_client, prefix=prefix)
    untrack = track_publishes([TASK], outstanding, app=app)
    try:
        yield {"app": app, "queue": queue, "outstanding": outstanding}
    finally:
        untrack()
        redis_client.delete(*[queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9))])
        app.close()


def _scripts_run(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("eval", "evalsha")
    )


def _publish(ctx: dict[str, Any], key: str, **options: Any) -> None:
    ctx["app"].send_task(TASK, args=[{"key": key, "body": "UNH+1'"}], queue=ctx["queue"], **options)


def _messages(client: redis.Redis, name: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(client.lrange(name, 0, -1))]


def test_one_script_per_tracked_publish(ctx: dict[str, Any], redis_client: redis.Redis) -> None:
    """Twenty publishes run twenty scripts (the separate record and confirm ran forty)."""
    _publish(ctx, "warm-up")  # the connection's first publish declares what it needs
    before = _scripts_run(redis_client)
    for i in range(20):
        _publish(ctx, f"K{i}")
    assert _scripts_run(redis_client) - before == 20
    assert len(redis_client.lrange(ctx["queue"], 0, -1)) == 21


def test_the_one_script_records_what_the_separate_calls_record(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """The message carries s0 and its lane; the unit's record names the message; the
    unit is indexed under pushed:<lane> with s1 > s0 and is not left unconfirmed."""
    out: Outstanding = ctx["outstanding"]
    queue = ctx["queue"]
    _publish(ctx, "K1")
    _publish(ctx, "K2", priority=7)
    plain = _messages(redis_client, queue)
    high = _messages(redis_client, f"{queue}\x06\x166")
    assert len(plain) == 1
    assert len(high) == 1
    for message, lane in ((plain[0], queue), (high[0], f"{queue}\x06\x166")):
        headers = message["headers"]
        s0 = headers[SEQ_HEADER]
        assert isinstance(s0, int)
        assert headers[LANE_HEADER] == lane
        key = "K1" if lane == queue else "K2"
        unit = out.get(key)
        assert unit is not None
        assert unit.task_id == headers["id"]
        assert unit.index_lane == lane
        s1 = redis_client.zscore(out.pushed_key(lane), key)
        assert s1 is not None
        assert int(s1) > s0
        assert redis_client.zscore(out.published_key(lane), key) is None
    assert out.queues() == [queue]
    s0_k1, s0_k2 = plain[0]["headers"][SEQ_HEADER], high[0]["headers"][SEQ_HEADER]
    assert s0_k1 < s0_k2  # one sequence, handed out in publish order


def test_a_batched_publish_is_recorded_with_its_push_not_before(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """In a kombu publish batch (the intake's publish thread) the pushes happen at the
    flush; a unit's s1 must not be handed out before: nothing is indexed until then,
    and then every unit is, with one script each."""
    out: Outstanding = ctx["outstanding"]
    queue = ctx["queue"]
    _publish(ctx, "warm-up")
    before = _scripts_run(redis_client)
    app = ctx["app"]
    with app.producer_or_acquire() as producer, producer.batch(max_size=100):
        for i in range(5):
            app.send_task(
                TASK, args=[{"key": f"B{i}", "body": "x"}], queue=queue, producer=producer
            )
        assert redis_client.zcard(out.pushed_key(queue)) == 1  # the warm-up only
        assert redis_client.zcard(out.published_key(queue)) == 0
    assert _scripts_run(redis_client) - before == 5
    messages = _messages(redis_client, queue)[1:]
    assert [m["headers"][SEQ_HEADER] for m in messages] == sorted(
        m["headers"][SEQ_HEADER] for m in messages
    )
    for i, message in enumerate(messages):
        s1 = redis_client.zscore(out.pushed_key(queue), f"B{i}")
        assert s1 is not None
        assert int(s1) > message["headers"][SEQ_HEADER]


def test_a_registry_on_another_database_keeps_the_separate_calls(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """tidegate's Redis is not the broker's database: the script cannot push, so the
    unit is recorded before the push and confirmed after it, as before."""
    queue = f"{prefix}-q"
    app = Celery("publish-other-db", broker=redis_url, set_as_current=False)
    install_write_tolerant_broker(app)
    kwargs = dict(redis_client.connection_pool.connection_kwargs)
    db = (int(kwargs.get("db") or 0) + 1) % 16
    other = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=db)
    out = Outstanding(other, prefix=prefix)
    untrack = track_publishes([TASK], out, app=app)
    try:
        app.send_task(TASK, args=[{"key": "K1", "body": "x"}], queue=queue)
        (message,) = _messages(redis_client, queue)
        s1 = other.zscore(out.pushed_key(queue), "K1")
        assert s1 is not None
        assert int(s1) > message["headers"][SEQ_HEADER]
    finally:
        untrack()
        redis_client.delete(queue)
        other.delete(*other.keys(f"{prefix}:*") or ["-"])
        other.close()
        app.close()


def test_a_publish_through_another_transport_is_still_recorded(
    ctx: dict[str, Any], redis_url: str, redis_client: redis.Redis
) -> None:
    """The app is on tidegate's channel but this publish goes through a connection of
    kombu's own transport (no channel hook runs): the unit is recorded and confirmed
    after the push, and said (``outstanding_recorded_late``), never left untracked."""
    from kombu import Connection
    from structlog.testing import capture_logs

    out: Outstanding = ctx["outstanding"]
    with Connection(redis_url) as conn, capture_logs() as logs:
        ctx["app"].send_task(
            TASK, args=[{"key": "L1", "body": "x"}], queue=ctx["queue"], connection=conn
        )
    (message,) = _messages(redis_client, ctx["queue"])
    assert SEQ_HEADER not in message["headers"]
    unit = out.get("L1")
    assert unit is not None
    assert unit.task_id == message["headers"]["id"]
    assert redis_client.zscore(out.pushed_key(ctx["queue"]), "L1") is not None
    assert [e["event"] for e in logs if e["event"].startswith("outstanding_")] == [
        "outstanding_recorded_late"
    ]


def _calls(client: redis.Redis, *names: str) -> dict[str, int]:
    """Calls per command; ``script`` sums its subcommands (Redis 7 counts them apart,
    6.2 as one)."""
    stats = client.info("commandstats")
    calls = {
        str(name).removeprefix("cmdstat_"): int(value.get("calls", 0))
        for name, value in stats.items()
    }
    return {n: sum(c for k, c in calls.items() if k == n or k.startswith(f"{n}|")) for n in names}


def _batch(ctx: dict[str, Any], keys: list[str], size: int) -> None:
    app = ctx["app"]
    with app.producer_or_acquire() as producer, producer.batch(max_size=size):
        for key in keys:
            app.send_task(
                TASK, args=[{"key": key, "body": "x"}], queue=ctx["queue"], producer=producer
            )


def test_a_batch_runs_the_script_by_sha_not_by_its_text(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """Ten batched publishes in batches of five: ten EVALSHA, no EVAL (the script's
    text is not sent per message); redis-py asks SCRIPT EXISTS once per flush, and
    loads nothing (the warm-up's publish loaded the script)."""
    _publish(ctx, "warm-up")
    before = _calls(redis_client, "eval", "evalsha", "script")
    _batch(ctx, [f"S{i}" for i in range(10)], 5)
    after = _calls(redis_client, "eval", "evalsha", "script")
    ran = {name: after[name] - before[name] for name in after}
    assert ran["eval"] == 0
    assert ran["evalsha"] == 10
    assert ran["script"] == 2  # SCRIPT EXISTS, one per flush
    assert len(_messages(redis_client, ctx["queue"])) == 11


def test_a_batch_loads_the_script_the_server_lost(
    ctx: dict[str, Any], redis_client: redis.Redis
) -> None:
    """NOSCRIPT fallback: the server's script cache is emptied (a restart, SCRIPT
    FLUSH) between publishes; the batch loads the script once and every unit is pushed
    and recorded, none left unconfirmed."""
    out: Outstanding = ctx["outstanding"]
    queue = ctx["queue"]
    _publish(ctx, "warm-up")
    redis_client.script_flush()
    before = _calls(redis_client, "script", "evalsha")
    _batch(ctx, [f"N{i}" for i in range(4)], 100)
    after = _calls(redis_client, "script", "evalsha")
    assert after["script"] - before["script"] == 2  # SCRIPT EXISTS, then SCRIPT LOAD once
    assert after["evalsha"] - before["evalsha"] == 4
    assert len(_messages(redis_client, queue)) == 5
    for i in range(4):
        unit = out.get(f"N{i}")
        assert unit is not None
        assert redis_client.zscore(out.pushed_key(queue), f"N{i}") is not None
    assert redis_client.zcard(out.published_key(queue)) == 0
