"""The demo's and the chaos runs' intake publishes through tidegate's tracked channel:
record, LPUSH and confirm as one script per document, as a worker's publish does —
not the separate record and confirm around kombu's LPUSH (two scripts, three round
trips). Real Redis; the run broker's own producer and tracking; scripts counted with
``INFO commandstats``; the publish loop is the run's intake (``_submit``)."""

from __future__ import annotations

from typing import Any, cast

import redis

from tidegate.harness.run_broker import RedisRunBroker
from tidegate.harness.scenarios.vessel import TASK_FOR_QUEUE, Submission, _submit
from tidegate.integrations.celery.broker import TRANSPORT
from tidegate.load.outstanding import SEQ_HEADER, Outstanding


def _scripts_run(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in ("eval", "evalsha"))


def test_the_intake_publishes_each_document_with_one_script(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    broker = RedisRunBroker(redis_url, redis_client)
    producer = broker.producer()
    outstanding = Outstanding(redis_client, prefix=prefix)
    untrack = broker.track(producer, list(TASK_FOR_QUEUE.values()), outstanding)
    queue = "edi.tos"
    keys = [f"{prefix}-D{i}" for i in range(6)]
    run: Any = type("Run", (), {})()
    run.submissions = [Submission(k, queue, {"key": k, "body": "UNH+1'"}) for k in keys]
    run.refused = []
    before_len = redis_client.llen(queue)
    try:
        assert producer.conf.broker_transport == TRANSPORT
        _submit(run, producer, 262_144)  # the connection's first publish declares things
        before = _scripts_run(redis_client)
        run.submissions = run.submissions[:3]
        _submit(run, producer, 262_144)
        assert _scripts_run(redis_client) - before == 3
        for key in keys:
            unit = outstanding.get(key)
            assert unit is not None
            assert redis_client.zscore(outstanding.pushed_key(queue), key) is not None
        newest = cast("bytes", redis_client.lindex(queue, 0))
        assert SEQ_HEADER in newest.decode()
    finally:
        untrack()
        producer.close()
        for _ in range(redis_client.llen(queue) - before_len):
            redis_client.lpop(queue)
