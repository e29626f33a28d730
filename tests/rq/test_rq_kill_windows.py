"""A whole RQ worker killed at each moment of a job's life: nothing lost, nothing twice.

"Whole worker" is what a lost host or a container's OOM kill takes: the worker's
main process *and* its work horse (RQ puts the horse in a process group of its own,
so killing the main's group alone leaves the horse running). Each moment gets its
own queue, worker and customs sim; the worker stops there (``rq_stops``), the test
SIGKILLs it, and fresh workers with RQ's own recovery — the intermediate-queue
cleanup, the abandoned-job cleanup — must bring every unit to exactly one
acceptance downstream (or a dead letter with its reason), and leave RQ holding
nothing: not queued, not started, not in its ``FailedJobRegistry``.

RQ's own floors set the pace: an execution's heartbeat lives ``--job-monitoring-
interval`` + 60 s, and a popped job is given back a minute after a cleanup first saw
it; so this test takes two to three minutes.
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
from rq.registry import FailedJobRegistry

from tidegate.flow import Gate
from tidegate.harness.polling import wait_for
from tidegate.integrations.rq import json_queue
from tidegate.load import DeadLetterQueue, DeliveryLedger, DeliveryState
from tidegate.sim import CustomsSim

pytestmark = [pytest.mark.redis, pytest.mark.slow]

#: moment → the job function that runs there.
MOMENTS = {
    "popped": "rq_jobs.lodge",
    "execution_prepared": "rq_jobs.lodge",
    "in_call": "rq_jobs.lodge",
    "accepted": "rq_stops.lodge_then_stop",
}


def kill_whole_worker(pid: int) -> None:
    """SIGKILL the worker's main process group and every descendant's (the horse)."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for proc in procs:
        try:
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        except ProcessLookupError:
            continue
    psutil.wait_procs(procs, timeout=10)


def rq_holdings(client: redis.Redis, queue_name: str) -> dict[str, int]:
    queue = json_queue(queue_name, client)
    return {
        "queued": queue.count,
        "popped": len(queue.intermediate_queue.get_job_ids()),
        "started": queue.started_job_registry.get_job_count(cleanup=False),
        "scheduled": queue.scheduled_job_registry.get_job_count(cleanup=False),
        "failed": FailedJobRegistry(queue_name, connection=client).count,
    }


def test_a_whole_worker_killed_at_any_moment_loses_nothing_and_sends_nothing_twice(
    redis_client: redis.Redis, prefix: str, workers: Callable[..., Any]
) -> None:
    """Killed after the pop, after the execution was recorded, in the call (the
    gateway has the document and holds the answer), and after the gateway accepted it
    but before the ledger said delivered: every unit ends accepted exactly once (or
    dead-lettered with a reason), and RQ ends holding none of them."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=100, burst=10)
    release = threading.Event()

    def held(seconds: float) -> None:
        if seconds > 0:
            release.wait(seconds)

    sims = {moment: CustomsSim(rate=100, burst=10, sleep=held) for moment in MOMENTS}
    queues = {moment: f"{prefix}-{moment}" for moment in MOMENTS}
    keys = {moment: f"kill-{moment}" for moment in MOMENTS}
    try:
        for sim in sims.values():
            sim.start()
        sims["in_call"].set_stragglers(120, count=1)
        stopped = []
        for moment, function in MOMENTS.items():
            pool = workers({"TIDEGATE_CUSTOMS_URL": sims[moment].url})
            [proc] = pool.start(
                [queues[moment]],
                burst=False,
                extra_env={"TIDEGATE_TEST_STOP_AT": moment},
                worker_args=(
                    *("--worker-class", "rq_stops.StoppingWorker"),
                    *("--job-monitoring-interval", "1"),
                ),
            )
            stopped.append(proc)
            job = json_queue(queues[moment], redis_client).enqueue(
                function, {"key": keys[moment], "type": "VERMAS", "body": "UNH+1+VERMAS'"}
            )
            if moment == "in_call":
                reached = lambda: keys["in_call"] in sims["in_call"].accepted_keys()  # noqa: E731
            else:
                marker = f"{prefix}:stopped:{job.id}"
                reached = lambda marker=marker: redis_client.exists(marker) == 1  # type: ignore[misc]  # noqa: E731
            wait_for(reached, 60, lambda moment=moment: f"the worker reached {moment}")  # type: ignore[misc]
            kill_whole_worker(proc.pid)
        release.set()  # the held call's connection is gone with its horse

        recovery = workers({})
        for moment in MOMENTS:
            recovery.start(
                [queues[moment]],
                burst=False,
                scheduler=True,
                extra_env={"TIDEGATE_CUSTOMS_URL": sims[moment].url},
                worker_args=(
                    *("--worker-class", "tidegate.integrations.rq.JsonWorker"),
                    *("--maintenance-interval", "1"),
                ),
            )
        dlq = DeadLetterQueue(redis_client, prefix=prefix)
        dead = lambda: {letter.key: letter.reason for letter in dlq.iter()}  # noqa: E731

        def settled(moment: str) -> bool:
            ended = keys[moment] in sims[moment].accepted_keys() or keys[moment] in dead()
            return ended and not any(rq_holdings(redis_client, queues[moment]).values())

        def state() -> str:
            return (
                "\n".join(
                    f"{m}: accepted={sims[m].accepted_keys()} "
                    f"rq={rq_holdings(redis_client, queues[m])}"
                    for m in MOMENTS
                )
                + f"\ndead={dead()}\n{recovery.logs()[-4000:]}"
            )

        wait_for(lambda: all(settled(m) for m in MOMENTS), 240, state)
        ledger = DeliveryLedger(redis_client, prefix=prefix)
        for moment in MOMENTS:
            accepted = sims[moment].accepted_keys()
            assert accepted == [keys[moment]], (moment, accepted)
            assert ledger.state("customs", keys[moment]) is DeliveryState.DELIVERED, moment
        assert dead() == {}
    finally:
        release.set()
        for sim in sims.values():
            sim.stop()


def test_a_worker_killed_during_maintenance_does_not_stop_the_recovery_for_long(
    redis_client: redis.Redis, prefix: str, workers: Callable[..., Any]
) -> None:
    """A worker is SIGKILLed in the middle of its maintenance pass, holding the queue's
    maintenance lock (RQ sets it for 899 s); then another worker dies having popped a
    job. The recovery worker must still give the job back within a minute or two
    (lock, then RQ's minute for a popped job) — not a quarter of an hour later."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=100, burst=10)
    queue_name = f"{prefix}-maintained"
    stopper = (
        *("--worker-class", "rq_stops.StoppingWorker"),
        *("--job-monitoring-interval", "1"),
    )
    with CustomsSim(rate=100, burst=10) as sim:
        env = {"TIDEGATE_CUSTOMS_URL": sim.url}
        pool = workers(env)
        [in_maintenance] = pool.start(
            [queue_name],
            burst=False,
            extra_env={"TIDEGATE_TEST_STOP_AT": "maintenance"},
            worker_args=stopper,
        )
        marker = f"{prefix}:stopped:maintenance"
        wait_for(lambda: redis_client.exists(marker) == 1, 60, lambda: "the worker in maintenance")
        kill_whole_worker(in_maintenance.pid)
        [popper] = pool.start(
            [queue_name],
            burst=False,
            extra_env={"TIDEGATE_TEST_STOP_AT": "popped"},
            worker_args=stopper,
        )
        job = json_queue(queue_name, redis_client).enqueue(
            "rq_jobs.lodge", {"key": "kill-maintained", "type": "VERMAS", "body": "x"}
        )
        popped = f"{prefix}:stopped:{job.id}"
        wait_for(lambda: redis_client.exists(popped) == 1, 60, lambda: "the worker popped it")
        kill_whole_worker(popper.pid)
        pool.start(
            [queue_name],
            burst=False,
            worker_args=(
                *("--worker-class", "tidegate.integrations.rq.JsonWorker"),
                *("--maintenance-interval", "1"),
            ),
        )

        def delivered() -> bool:
            holdings = rq_holdings(redis_client, queue_name)
            return sim.accepted_keys() == ["kill-maintained"] and not any(holdings.values())

        wait_for(
            delivered,
            240,
            lambda: (
                f"{sim.accepted_keys()} {rq_holdings(redis_client, queue_name)}"
                f"\n{pool.logs()[-3000:]}"
            ),
        )
