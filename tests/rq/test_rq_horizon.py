"""The RQ retry horizon is measured on the fleet clock (Redis TIME), not the worker's.

The job runs in-process (``job.perform()``, as a work horse does) so that this
process's wall clock can be skewed; the downstream is down for every call.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from rq.job import Job

from tidegate.delivery import RetryPolicy
from tidegate.errors import DownstreamUnavailable
from tidegate.flow import Gate
from tidegate.integrations.rq import ATTEMPT_META, JsonSerializer, gated, json_queue
from tidegate.integrations.rq.gated import FIRST_FAILED_META
from tidegate.load.dlq import DeadLetterQueue

pytestmark = pytest.mark.redis

HOUR_HORIZON = RetryPolicy(max_attempts=2, min_horizon_s=3600, backoff_base_s=0.1)


@gated("customs", max_wait_s=1, retry_policy=HOUR_HORIZON)
def lodge_while_down(envelope: dict[str, Any]) -> dict[str, Any]:
    """The customs gateway is down: every call fails transiently."""
    raise DownstreamUnavailable("customs", "503 Service Unavailable")


def _redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


@pytest.fixture
def run_skewed(
    redis_url: str, redis_client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Run one job of ``lodge_while_down`` with this process's clock a day ahead."""
    monkeypatch.setenv("TIDEGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("TIDEGATE_PREFIX", prefix)
    Gate(redis_client, "customs", prefix=prefix).configure(rate=100, burst=10)
    queue = json_queue(f"{prefix}-customs", redis_client)

    def run(meta: dict[str, Any]) -> tuple[dict[str, Any], list[Job]]:
        job = queue.enqueue(lodge_while_down, {"key": "VERMAS-1"}, meta=meta)
        job = Job.fetch(job.id, connection=redis_client, serializer=JsonSerializer)
        real_time = time.time
        with monkeypatch.context() as patched:
            patched.setattr(time, "time", lambda: real_time() + 86_400)
            result = job.perform()
        scheduled = [
            Job.fetch(job_id, connection=redis_client, serializer=JsonSerializer)
            for job_id in queue.scheduled_job_registry.get_job_ids()
        ]
        return result, scheduled

    try:
        yield run
    finally:
        keys = list(redis_client.scan_iter(match=f"rq:*{prefix}*", count=1000))
        for key in redis_client.scan_iter(match="rq:job:*", count=1000):
            if (redis_client.hget(key, "origin") or b"").decode().startswith(prefix):
                keys.append(key)
        if keys:
            redis_client.delete(*keys)


def test_a_worker_clock_ahead_does_not_dead_letter_before_the_horizon(
    run_skewed: Any, redis_client: redis.Redis, prefix: str
) -> None:
    """Attempts spent, the outage a minute old on Redis's clock (a day on the worker's):
    the job is re-scheduled with its first failure unchanged, nothing dead-lettered."""
    first_failed = _redis_now(redis_client) - 60

    result, scheduled = run_skewed({ATTEMPT_META: 5, FIRST_FAILED_META: first_failed})

    assert result["tidegate"] == "parked", result
    assert len(DeadLetterQueue(redis_client, prefix=prefix)) == 0
    (again,) = scheduled
    assert again.meta[ATTEMPT_META] == 6
    assert again.meta[FIRST_FAILED_META] == pytest.approx(first_failed)


def test_the_first_failure_is_stamped_with_redis_time(
    run_skewed: Any, redis_client: redis.Redis
) -> None:
    before = _redis_now(redis_client)

    result, scheduled = run_skewed({})

    assert result["tidegate"] == "parked"
    (again,) = scheduled
    assert before <= again.meta[FIRST_FAILED_META] <= _redis_now(redis_client)
