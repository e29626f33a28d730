"""JSON only on RQ: tidegate's queues write JSON and its worker never unpickles a job."""

from __future__ import annotations

import json
import os
import pickle
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.job import Retry
from rq.queue import Queue
from rq.registry import FailedJobRegistry

from tidegate.errors import MalformedUnit, TidegateError
from tidegate.flow import Gate
from tidegate.integrations.rq import (
    ContentRefused,
    JsonSerializer,
    RqSender,
    json_queue,
)
from tidegate.load.dlq import DeadLetterQueue
from tidegate.sim import CustomsSim


class Trap:
    """Unpickling this makes directory ``path``: proof that someone unpickled it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (str(self.path),))


def envelope(key: str) -> dict[str, Any]:
    return {"key": key, "type": "VERMAS", "class": "VERMAS", "body": "UNH+1+VERMAS'"}


def test_the_serializer_refuses_pickle_without_unpickling_it(tmp_path: Path) -> None:
    """Pickled bytes are a typed error from tidegate's tree; the trap never fires."""
    marker = tmp_path / "unpickled"
    data = pickle.dumps(("rq_jobs.lodge", None, [Trap(marker)], {}), protocol=5)

    with pytest.raises(ContentRefused) as info:
        JsonSerializer.loads(data)

    assert info.value.content == "pickle"
    assert isinstance(info.value, MalformedUnit)
    assert isinstance(info.value, TidegateError)
    assert not marker.exists()


def test_the_serializer_names_other_non_json_data_and_round_trips_json() -> None:
    with pytest.raises(ContentRefused) as info:
        JsonSerializer.loads(b"\xff\xfenot json")
    assert info.value.content == "not JSON"
    job = ["rq_jobs.lodge", None, [envelope("k")], {}]
    assert JsonSerializer.loads(JsonSerializer.dumps(job)) == job


@pytest.mark.redis
def test_tidegates_rq_sender_stores_jobs_as_json(
    redis_client: redis.Redis, rq_queue: str, workers: Callable[..., Any]
) -> None:
    """What the intake enqueues is JSON in Redis — no pickle for a worker to load."""
    RqSender(redis_client).send(rq_queue, "rq_jobs.lodge", envelope("sent-1"))

    (job_id,) = json_queue(rq_queue, redis_client).job_ids
    raw = redis_client.hget(f"rq:job:{job_id}", "data")
    assert raw is not None
    func, _, args, _ = json.loads(zlib.decompress(raw))
    assert (func, args[0]["key"]) == ("rq_jobs.lodge", "sent-1")


@pytest.mark.redis
@pytest.mark.slow
def test_a_planted_pickle_job_is_refused_and_reported_and_a_json_job_runs(
    redis_client: redis.Redis,
    prefix: str,
    rq_queue: str,
    workers: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """Two jobs planted with RQ's pickle default — one that would be delivered if run,
    one that runs code when unpickled — and one JSON job, for a real JsonWorker: the
    JSON job is delivered; the pickled ones never reach the downstream, the trap
    never fires, and each is dead-lettered, failed in RQ (never retried) and logged
    once with its job id."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=100, burst=10)
    marker = tmp_path / "unpickled"
    pickled = Queue(rq_queue, connection=redis_client)
    would_deliver = pickled.enqueue("rq_jobs.lodge", envelope("pickled-1"), retry=Retry(max=2))
    trap = pickled.enqueue("rq_jobs.lodge", {**envelope("pickled-2"), "trap": Trap(marker)})
    json_queue(rq_queue, redis_client).enqueue("rq_jobs.lodge", envelope("json-1"))

    with CustomsSim(rate=100, burst=10) as sim:
        pool = workers({"TIDEGATE_CUSTOMS_URL": sim.url})
        pool.wait(pool.start([rq_queue]), timeout_s=60)
        accepted = sim.accepted_keys()

    assert accepted == ["json-1"], pool.logs()
    assert not marker.exists()
    letters = {letter.key: letter for letter in DeadLetterQueue(redis_client, prefix=prefix).iter()}
    assert set(letters) == {would_deliver.id, trap.id}
    for letter in letters.values():
        assert letter.exception == "ContentRefused"
        assert letter.reason == "refused: job data is pickle; tidegate's RQ workers take JSON only"
        assert letter.payload == {"queue": rq_queue, "rq_job_id": letter.key}
        assert letter.attempts == 1  # refused once: an RQ retry would only refuse it again
    failed = FailedJobRegistry(rq_queue, connection=redis_client).get_job_ids()
    assert sorted(failed) == sorted([would_deliver.id, trap.id])
    events = [
        json.loads(line)
        for line in pool.logs().splitlines()
        if line.startswith("{") and '"rq_job_refused"' in line
    ]
    assert sorted((e["job_id"], e["content"]) for e in events) == sorted(
        [(would_deliver.id, "pickle"), (trap.id, "pickle")]
    )
    assert json_queue(rq_queue, redis_client).count == 0


@pytest.mark.redis
@pytest.mark.slow
def test_a_plain_json_rq_worker_with_tidegates_handler_dead_letters_a_pickle_job(
    redis_client: redis.Redis,
    prefix: str,
    rq_queue: str,
    workers: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """Without JsonWorker, RQ's own worker on ``--serializer json`` fails the job
    undecoded; tidegate's exception handler then dead-letters it as refused."""
    marker = tmp_path / "unpickled"
    trap = Queue(rq_queue, connection=redis_client).enqueue(
        "rq_jobs.explode", {**envelope("pickled-3"), "trap": Trap(marker)}
    )

    pool = workers({})
    pool.wait(pool.start([rq_queue], worker_args=("--serializer", "json")), timeout_s=60)

    assert not marker.exists()
    letter = DeadLetterQueue(redis_client, prefix=prefix).get(trap.id)
    assert letter is not None, pool.logs()
    assert (letter.exception, letter.reason) == (
        "ContentRefused",
        "refused: job data is pickle; tidegate's RQ workers take JSON only",
    )
