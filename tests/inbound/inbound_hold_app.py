"""A Celery app whose one task holds its message until a Redis key appears.

Started by test_depth.py as a real worker (``celery -A inbound_hold_app worker``, with
this directory on PYTHONPATH) so that a real, reserved, unacknowledged message sits in
kombu's ``unacked`` hash while the probe reads it.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

URL = os.environ["TIDEGATE_REDIS_URL"]

app = Celery("tidegate-test-hold", broker=URL)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="tidegate.test.hold")
def hold(release_key: str) -> None:
    """Block until ``release_key`` exists (at most a minute)."""
    client = redis.Redis.from_url(URL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not client.exists(release_key):
        time.sleep(0.05)
