"""Work an RQ worker was killed under is run again, reconciled, never sent twice.

A killed *work horse* is seen at once by its worker (``JsonWorker``); a killed
*worker* is found by RQ's started-job registry cleanup (the abandoned-job path, run
over the whole suite in ``tests/lifecycle``). Either way the job comes back marked
redelivered, and the lifecycle asks the downstream before sending it again.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import psutil
import pytest
import redis
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.registry import FailedJobRegistry

from tidegate.flow import Gate
from tidegate.harness.polling import wait_for
from tidegate.integrations.rq import REDELIVERED_META, JsonSerializer, JsonWorker, json_queue
from tidegate.integrations.rq._serializer import refusal
from tidegate.load import DeadLetterQueue, DeliveryLedger, DeliveryState
from tidegate.sim import CustomsSim

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_a_killed_work_horse_is_redelivered_and_confirmed_not_sent_twice(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """The work horse is SIGKILLed while the gateway holds its call (it has already
    taken the document): the job is retried as a redelivery, the lookup finds the
    document, the gateway sees it once and RQ's failed registry stays empty."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=100, burst=10)
    release = threading.Event()

    def held(seconds: float) -> None:
        if seconds > 0:
            release.wait(seconds)

    try:
        with CustomsSim(rate=100, burst=10, sleep=held) as sim:
            sim.set_stragglers(60, count=1)
            job = json_queue(rq_queue, redis_client).enqueue(
                "rq_jobs.lodge", {"key": "horse-1", "type": "VERMAS", "body": "UNH+1+VERMAS'"}
            )
            pool = workers({"TIDEGATE_CUSTOMS_URL": sim.url})
            [worker] = pool.start([rq_queue], burst=False)
            wait_for(lambda: "horse-1" in sim.accepted_keys(), 60, "the gateway took the call")
            [horse] = psutil.Process(worker.pid).children()
            os.kill(horse.pid, signal.SIGKILL)
            release.set()

            def finished() -> bool:
                fetched = Job.fetch(job.id, connection=redis_client, serializer=JsonSerializer)
                return fetched.get_status() == JobStatus.FINISHED

            wait_for(finished, 60, f"the job finished\n{pool.logs()}")
            done = Job.fetch(job.id, connection=redis_client, serializer=JsonSerializer)
            assert done.return_value() == {"tidegate": "already_delivered"}
            assert done.meta[REDELIVERED_META] == 1
            assert sim.accepted_keys() == ["horse-1"]
    finally:
        release.set()
    assert FailedJobRegistry(rq_queue, connection=redis_client).count == 0
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    assert ledger.state("customs", "horse-1") is DeliveryState.DELIVERED


def test_a_store_restarted_without_its_files_puts_the_next_work_horse_in_doubt(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """tidegate's store (its own Redis, RQ's untouched) is killed after a delivery and
    comes back with nothing: the ``delivered`` mark and the record of the server
    before are gone, so the same document, queued again as the lost second's messages
    come back, looks new. The forking worker read the store's server before each fork,
    so its next work horse knows the server changed: it asks the gateway first, which
    has the document, and does not send it again (before: sent twice)."""
    from tidegate.redis_server import EmbeddedRedis

    store = EmbeddedRedis(appendonly=False).start()
    try:
        Gate(redis.Redis.from_url(store.url), "customs", prefix=prefix).configure(
            rate=100, burst=10
        )
        queue = json_queue(rq_queue, redis_client)
        envelope = {"key": "lost-1", "type": "VERMAS", "body": "UNH+1+VERMAS'"}
        with CustomsSim(rate=100, burst=10) as sim:
            pool = workers({"TIDEGATE_CUSTOMS_URL": sim.url, "TIDEGATE_REDIS_URL": store.url})
            pool.start([rq_queue], burst=False)

            def status(job: Job) -> JobStatus | None:
                fetched = Job.fetch(job.id, connection=redis_client, serializer=JsonSerializer)
                return fetched.get_status()

            first = queue.enqueue("rq_jobs.lodge", envelope)
            wait_for(lambda: status(first) == JobStatus.FINISHED, 60, f"sent\n{pool.logs()}")
            store.kill()
            store.start()
            Gate(redis.Redis.from_url(store.url), "customs", prefix=prefix).configure(
                rate=100, burst=10
            )
            again = queue.enqueue("rq_jobs.lodge", envelope)
            wait_for(lambda: status(again) == JobStatus.FINISHED, 60, f"again\n{pool.logs()}")
            done = Job.fetch(again.id, connection=redis_client, serializer=JsonSerializer)
            stats = sim.stats(timeline=False)
    finally:
        store.stop()

    assert done.return_value() == {"tidegate": "already_delivered"}
    assert sim.accepted_keys() == ["lost-1"]
    assert stats["duplicates"] == 0


def test_a_job_that_cannot_reach_tidegates_redis_stays_in_rq_and_is_delivered_later(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """tidegate's Redis is unreachable from the workers (RQ's is fine): nothing can be
    parked or dead-lettered, so the job goes back to its queue again and again — never
    to the DLQ, never to RQ's failed registry; once the workers reach it, it is
    delivered once."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=100, burst=10)
    queue = json_queue(rq_queue, redis_client)
    with CustomsSim(rate=100, burst=10) as sim:
        job = queue.enqueue(
            "rq_jobs.lodge", {"key": "away-1", "type": "VERMAS", "body": "UNH+1+VERMAS'"}
        )
        cut_off = workers(
            {"TIDEGATE_CUSTOMS_URL": sim.url, "TIDEGATE_REDIS_URL": "redis://127.0.0.1:9/0"}
        )
        [worker] = cut_off.start([rq_queue], burst=False)

        def retried() -> bool:
            fetched = Job.fetch(job.id, connection=redis_client, serializer=JsonSerializer)
            return int(fetched.meta.get("tidegate_failures", 0)) >= 2

        wait_for(retried, 60, f"the job was given back twice\n{cut_off.logs()}")
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
        assert len(DeadLetterQueue(redis_client, prefix=prefix)) == 0
        assert FailedJobRegistry(rq_queue, connection=redis_client).count == 0
        assert sim.accepted_keys() == []
        # A SIGTERM that lands just after the worker popped the job (RQ still calls it
        # idle) stops it there: the job waits in RQ's intermediate list, which only the
        # intermediate-queue cleanup gives back, a minute on. So: a long-running worker
        # with frequent maintenance, not a burst worker that would find the queue empty.
        pool = workers({"TIDEGATE_CUSTOMS_URL": sim.url})
        pool.start(
            [rq_queue],
            burst=False,
            worker_args=(
                *("--worker-class", "tidegate.integrations.rq.JsonWorker"),
                *("--maintenance-interval", "1"),
            ),
        )
        wait_for(lambda: sim.accepted_keys() != [], 150, f"delivered\n{pool.logs()}")
        assert sim.accepted_keys() == ["away-1"]


def test_a_job_a_dead_worker_popped_but_never_started_goes_back_to_its_queue(
    redis_client: redis.Redis, prefix: str, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """RQ's intermediate-queue cleanup fails such a job ("stuck in intermediate
    queue"), into its own registry where tidegate would never see it; tidegate's
    worker puts it back on its queue as a redelivery instead."""
    queue = json_queue(rq_queue, redis_client)
    job = queue.enqueue("rq_jobs.lodge", {"key": "popped-1", "type": "VERMAS", "body": "x"})
    # Popped as a worker pops it (into RQ's intermediate list), then the worker died.
    redis_client.lmove(queue.key, queue.intermediate_queue_key, "RIGHT", "LEFT")
    worker = JsonWorker([queue], connection=redis_client)
    worker.handle_job_failure(job, queue, exc_string="Job was stuck in intermediate queue.")
    again = Job.fetch(job.id, connection=redis_client, serializer=JsonSerializer)
    assert queue.get_job_ids() == [job.id]
    assert again.get_status() == JobStatus.QUEUED
    assert again.meta[REDELIVERED_META] == 1
    assert FailedJobRegistry(rq_queue, connection=redis_client).count == 0


def test_rqs_recovery_paths_read_a_dead_workers_job_as_json(
    redis_client: redis.Redis, rq_queue: str
) -> None:
    """RQ's CLI builds a worker's queues with its own serializer (pickle unless told),
    and its recovery — the abandoned-job cleanup, the intermediate-queue cleanup —
    reads a dead worker's job through the queue's. tidegate's worker makes its queues
    JSON: the job is read, not refused as unreadable and lost."""
    job = json_queue(rq_queue, redis_client).enqueue(
        "rq_jobs.lodge", {"key": "dead-1", "type": "VERMAS", "body": "x"}
    )
    worker = JsonWorker([Queue(rq_queue, connection=redis_client)], connection=redis_client)
    [queue] = worker.queues
    fetched = queue.fetch_job(job.id)
    assert fetched is not None
    assert refusal(fetched) is None
    assert fetched.args == [{"key": "dead-1", "type": "VERMAS", "body": "x"}]
    registry = queue.started_job_registry
    assert registry.serializer is queue.serializer
