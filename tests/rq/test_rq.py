"""The RQ integration with real ``rq worker`` processes: gate, parking, DLQ, admission."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from rq.callbacks import Callback
from rq.job import Job, Retry
from rq.registry import FailedJobRegistry
from rq.worker import Worker

from tidegate.edi.classify import DocumentClass
from tidegate.flow import Gate
from tidegate.harness.polling import wait_for
from tidegate.integrations.rq import (
    ATTEMPT_META,
    JsonSerializer,
    RqDepthProbe,
    dead_letter_on_failure,
    json_queue,
    rq_admission,
)
from tidegate.load.admission import Inbound
from tidegate.load.dlq import DeadLetterQueue
from tidegate.load.shedding import SheddingPolicy
from tidegate.load.watermarks import Watermarks, WatermarkStore
from tidegate.sim import CustomsSim

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def envelope(key: str) -> dict[str, Any]:
    return {"key": key, "type": "VERMAS", "class": "VERMAS", "body": "UNH+1+VERMAS'"}


def test_rq_workers_stay_within_the_fleet_wide_gate(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """Three worker processes, 30 jobs, a gateway of 10/s burst 3: the gate (10/s, burst 1)
    keeps the fleet under it — 0 × 429, every document accepted once."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=10, burst=1)
    queue = json_queue(rq_queue, redis_client)
    with CustomsSim(rate=10, burst=3, suspend_after=1000) as sim:
        for n in range(30):
            queue.enqueue("rq_jobs.lodge", envelope(f"k{n}"))
        pool = workers({"TIDEGATE_CUSTOMS_URL": sim.url})
        pool.wait(pool.start([rq_queue], count=3), timeout_s=90)
        stats = sim.stats(timeline=False)
    assert stats["distinct_keys"] == 30
    assert stats["duplicates"] == 0
    assert stats["responses_429"] == 0, pool.logs()
    assert queue.count == 0
    assert FailedJobRegistry(rq_queue, connection=redis_client).count == 0


def test_a_job_that_cannot_pass_the_gate_is_parked_in_rqs_scheduler(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """Gate paused for 2 s, max wait 0.2 s: the job is re-scheduled (not held, no attempt
    burnt) and delivered once the scheduler releases it."""
    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=50, burst=5)
    queue = json_queue(rq_queue, redis_client)
    with CustomsSim(rate=50, burst=5) as sim:
        pool = workers({"TIDEGATE_CUSTOMS_URL": sim.url, "TIDEGATE_MAX_WAIT_S": "0.2"})
        pool.start([rq_queue], burst=False, scheduler=True)
        # The pause starts once the worker listens: a worker slow to start (shared
        # CPUs) must not find it over already.
        wait_for(lambda: Worker.count(queue=queue) == 1, 60, "the worker registered")
        gate.pause(2, "maintenance")
        first = queue.enqueue("rq_jobs.lodge", envelope("parked-1"))
        wait_for(lambda: sim.stats(timeline=False)["distinct_keys"] == 1, 30, pool.logs())
        # The sim counts the call before the worker records the job as finished.
        wait_for(lambda: queue.finished_job_registry.count == 2, 30, pool.logs())
    first.refresh()
    result = first.return_value()
    assert (result["tidegate"], result["reason"]) == ("parked", "gate_paused")
    assert 0 < result["delay_s"] <= 2.5
    scheduled = [
        Job.fetch(job_id, connection=redis_client, serializer=JsonSerializer)
        for job_id in queue.finished_job_registry.get_job_ids()
        if job_id != first.id
    ]
    assert [job.meta.get(ATTEMPT_META) for job in scheduled] == [0]


def test_failed_jobs_land_in_the_dlq_with_their_reason(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """A downstream refusal (gated), a bug, a bug that exhausted RQ's retries and a bug
    with the failure callback: one DLQ record each, with a reason an operator can read."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=100, burst=10)
    queue = json_queue(rq_queue, redis_client)
    callback_queue = json_queue(f"{rq_queue}-cb", redis_client)
    queue.enqueue("rq_jobs.refused", envelope("refused-1"))
    queue.enqueue("rq_jobs.explode", envelope("bug-1"))
    queue.enqueue("rq_jobs.explode", envelope("bug-retried"), retry=Retry(max=1))
    callback_queue.enqueue(
        "rq_jobs.explode", envelope("bug-cb"), on_failure=Callback(dead_letter_on_failure)
    )
    pool = workers({"TIDEGATE_CUSTOMS_URL": "http://127.0.0.1:9"})
    pool.wait(
        pool.start([rq_queue]) + pool.start([callback_queue.name], handler=False), timeout_s=60
    )
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    letters = {letter.key: letter for letter in dlq.iter()}
    assert set(letters) == {"refused-1", "bug-1", "bug-retried", "bug-cb"}, pool.logs()
    assert letters["refused-1"].reason == "downstream rejected the document (HTTP 422)"
    assert letters["bug-1"].reason == "unexpected error (ValueError)"
    assert letters["bug-retried"].reason == "retries exhausted after 2 attempts (ValueError)"
    assert letters["bug-retried"].attempts == 2
    assert letters["bug-cb"].reason == "unexpected error (ValueError)"
    assert letters["bug-1"].payload["task"] == "rq_jobs.explode"
    assert letters["bug-1"].payload["queue"] == rq_queue
    # RQ's own bookkeeping still runs: the failed bugs are in its registry too.
    assert FailedJobRegistry(rq_queue, connection=redis_client).count == 2


def test_rq_admission_sheds_on_queue_count_and_replays_through_the_intake(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """queue.count over HWM for 2 samples: the sheddable documents go to the quarantine;
    after the workers drained the queue, a replay queues them and all are delivered."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=500, burst=50)
    bulk = DocumentClass("BULK_BL_PDF", rq_queue, sheddable=True, critical=False)
    now = [0.0]
    admission = rq_admission(
        redis_client,
        {rq_queue: "rq_jobs.lodge"},
        prefix=prefix,
        policy=SheddingPolicy(sheddable={"BULK_BL_PDF"}, classes={"BULK_BL_PDF": bulk}),
        watermarks=WatermarkStore(
            redis_client, prefix=prefix, defaults=Watermarks(hwm=5, lwm=1, shed_after=2)
        ),
        board=None,
        interval_s=1.0,
        clock=lambda: now[0],
    )
    outcomes = []
    for second in range(3):
        now[0] = float(second)
        outcomes += [
            admission.submit(Inbound(f"d{second}-{n}", bulk, envelope(f"d{second}-{n}")))
            for n in range(6)
        ]
    assert [o.quarantined for o in outcomes].count(True) == 6  # the third second's six
    assert RqDepthProbe(redis_client).sample([rq_queue])[rq_queue].ready == 12

    with CustomsSim(rate=500, burst=50) as sim:
        pool = workers({"TIDEGATE_CUSTOMS_URL": sim.url})
        pool.wait(pool.start([rq_queue]))
        now[0] = 10.0
        report = admission.replay(rq_queue, 100)
        pool.wait(pool.start([rq_queue]))
        stats = sim.stats(timeline=False)
    assert report.replayed == 6
    assert stats["distinct_keys"] == 18
    assert len(admission.quarantine) == 0
    assert admission.quarantine.stats()["replayed_total"] == {"BULK_BL_PDF": 6}
