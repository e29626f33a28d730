"""The demo's front door: concurrent senders post a burst to an in-process intake service."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from celery import Celery

from tidegate.harness.burst import vessel_burst
from tidegate.harness.front_door import demo_pipeline, intake_keys, post_burst, serve_in_thread
from tidegate.harness.scenarios.vessel import TASK_FOR_QUEUE

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _broker_keys(client: redis.Redis) -> list[str]:
    keys = []
    for queue in TASK_FOR_QUEUE:
        for raw in client.lrange(queue, 0, -1):
            args, _kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
            keys.append(args[0]["key"])
    return sorted(keys)


def test_the_burst_is_acknowledged_once_each_and_the_resends_are_duplicates(
    own_redis: str,
) -> None:
    """12 interchanges by 3 senders, then 2 sent again: 12 acknowledgements with their
    latencies, 2 duplicates, 14 posts; the broker holds exactly the 12 units the senders
    computed the keys of, once each."""
    client = redis.Redis.from_url(own_redis)
    producer = Celery("front-door-test", broker=own_redis)
    bodies = [d.text.encode("latin-1") for d in vessel_burst(12, seed=3)]
    pipeline = demo_pipeline(client, "tgfront", producer, TASK_FOR_QUEUE, max_payload_bytes=1 << 20)
    try:
        with serve_in_thread(pipeline) as url:
            posting = post_burst(url, bodies, senders=3, resends=2)
    finally:
        producer.close()
    report = posting.report()
    assert report["posted"] == 14
    assert report["acknowledged"] == 12
    assert report["duplicates_rejected"] == 2
    assert report["retry_after"] == 0
    assert report["failed"] == 0
    assert report["ack_p50_ms"] is not None
    assert report["ack_p99_ms"] >= report["ack_p50_ms"]
    assert _broker_keys(client) == sorted(k for body in bodies for k in intake_keys(body))
    client.close()
