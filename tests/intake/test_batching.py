"""One publishing thread, one flush per batch: a request is released only by the flush
that carried its units, and every request of a failed flush is told to retry."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
import redis
from celery import Celery

from tidegate.edi.classify import VERMAS
from tidegate.errors import BackendUnavailable, PayloadTooLarge
from tidegate.intake import AdmissionPublisher
from tidegate.intake.batching import BatchingCelerySender, PublishThread
from tidegate.integrations.celery.sender import CelerySender
from tidegate.load.admission import Admission, Inbound


def _unit(key: str, queue: str = "q") -> Inbound:
    return Inbound(key, dataclasses.replace(VERMAS, queue=queue), {"key": key})


class _Recorder:
    """publish_one and batch for a PublishThread, recording what happens when."""

    def __init__(self, *, fail_flush: bool = False, bad_key: str | None = None) -> None:
        self.events: list[str] = []
        self.fail_flush = fail_flush
        self.bad_key = bad_key
        self.first_call = threading.Event()
        self.release_first = threading.Event()

    def publish_one(self, units: Sequence[Inbound]) -> None:
        if not self.first_call.is_set():
            self.first_call.set()
            self.release_first.wait(10)
        if any(u.key == self.bad_key for u in units):
            raise PayloadTooLarge(self.bad_key, 10, 1)
        self.events.append("send:" + ",".join(u.key for u in units))

    @contextmanager
    def batch(self) -> Iterator[None]:
        self.events.append("begin")
        yield
        if self.fail_flush:
            raise redis.ConnectionError("broker went away")
        self.events.append("flush")


class _Posts:
    """Requests posted from their own threads; ``results`` fills as they return."""

    def __init__(self) -> None:
        self.results: dict[str, object] = {}
        self.workers: list[threading.Thread] = []

    def join(self) -> dict[str, object]:
        for worker in self.workers:
            worker.join(10)
        return self.results


def _post_in_threads(thread: PublishThread, keys: Sequence[str]) -> _Posts:
    posts = _Posts()
    results = posts.results

    def post(key: str) -> None:
        try:
            thread.publish([_unit(key)])
            results[key] = "ok"
        except Exception as exc:
            results[key] = exc

    posts.workers = [threading.Thread(target=post, args=(k,)) for k in keys]
    for worker in posts.workers:
        worker.start()
    return posts


def test_requests_waiting_together_share_one_flush_and_are_released_after_it() -> None:
    """While the first batch is held, three more requests queue up: they go out in the
    second batch, together, and none of them returns before that batch's flush."""
    recorder = _Recorder()
    thread = PublishThread(recorder.publish_one, batch=recorder.batch)
    try:
        first = _post_in_threads(thread, ["a"])
        assert recorder.first_call.wait(10)
        rest = _post_in_threads(thread, ["b", "c", "d"])
        deadline = time.monotonic() + 10
        while thread._jobs.qsize() < 3 and time.monotonic() < deadline:
            threading.Event().wait(0.001)  # the three handed over, none taken yet
        assert thread._jobs.qsize() == 3
        assert rest.results == {}
        recorder.release_first.set()
        assert first.join() == {"a": "ok"}
        assert rest.join() == {"b": "ok", "c": "ok", "d": "ok"}
    finally:
        thread.close()
    assert recorder.events[:3] == ["begin", "send:a", "flush"]
    second = recorder.events[3:]
    assert second[0] == "begin"
    assert second[-1] == "flush"
    assert sorted(second[1:-1]) == ["send:b", "send:c", "send:d"]
    assert thread.batches == 2


def test_a_failed_flush_fails_every_request_of_the_batch_as_backend_unavailable() -> None:
    """No request is acknowledged when the broker did not take its batch."""
    recorder = _Recorder(fail_flush=True)
    recorder.first_call.set()  # no holding
    thread = PublishThread(recorder.publish_one, batch=recorder.batch)
    try:
        results = _post_in_threads(thread, ["a", "b"]).join()
    finally:
        thread.close()
    assert set(results) == {"a", "b"}
    assert all(isinstance(r, BackendUnavailable) for r in results.values()), results
    assert "flush" not in recorder.events


def test_one_requests_own_error_fails_it_alone() -> None:
    """A unit too large fails its own request; the others of the batch are published."""
    recorder = _Recorder(bad_key="b")
    recorder.first_call.set()
    thread = PublishThread(recorder.publish_one, batch=recorder.batch)
    try:
        results = _post_in_threads(thread, ["a", "b", "c"]).join()
    finally:
        thread.close()
    assert results["a"] == "ok"
    assert results["c"] == "ok"
    assert isinstance(results["b"], PayloadTooLarge)


def test_the_thread_restarts_after_close_and_a_request_never_hangs() -> None:
    recorder = _Recorder()
    recorder.first_call.set()
    thread = PublishThread(recorder.publish_one, batch=recorder.batch)
    thread.publish([_unit("a")])
    thread.close()
    thread.publish([_unit("b")])
    thread.close()
    assert recorder.events == ["begin", "send:a", "flush", "begin", "send:b", "flush"]


@pytest.mark.redis
def test_inside_a_batch_nothing_reaches_redis_until_the_flush_and_then_all_does(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """The real kombu pipeline on the real Redis broker: the messages are the same
    Celery task messages a plain send writes (task name, args, queue)."""
    app = Celery("tidegate-batch-test", broker=redis_url)
    queue = f"{prefix}:edi.customs"
    try:
        sender = BatchingCelerySender(app)
        sender.send(queue, "intake.test.task", {"key": "plain"})
        with sender.batch():
            for index in range(5):
                sender.send(queue, "intake.test.task", {"key": f"k{index}"})
            assert redis_client.llen(queue) == 1
        assert redis_client.llen(queue) == 6
        messages = [json.loads(raw) for raw in redis_client.lrange(queue, 0, -1)]
        assert {m["headers"]["task"] for m in messages} == {"intake.test.task"}
        plain = messages[-1]  # LPUSH: the first sent is the last in the list
        assert "plain" in plain["headers"]["argsrepr"]
        assert set(messages[0]["headers"]) == set(plain["headers"])
        assert messages[0]["properties"]["delivery_info"]["routing_key"] == queue
    finally:
        app.close()


@pytest.mark.redis
def test_the_admission_publisher_batches_through_one_thread_on_a_real_broker(
    admission: Admission, redis_client: redis.Redis, queue_of
) -> None:
    """Eight concurrent requests: every unit lands in its queue once; the admission's
    Celery sender was given its batching twin."""
    assert type(admission.sender) is CelerySender
    publisher = AdmissionPublisher(admission)
    assert isinstance(admission.sender, BatchingCelerySender)
    queue = queue_of("edi.customs")
    try:
        errors: list[BaseException] = []

        def post(number: int) -> None:
            try:
                publisher.publish([_unit(f"u{number}-{i}", queue) for i in range(3)])
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=post, args=(n,)) for n in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
    finally:
        publisher.close()
    assert errors == []
    raws = redis_client.lrange(queue, 0, -1)
    keys = {json.loads(raw)["headers"]["argsrepr"] for raw in raws}
    assert len(raws) == len(keys) == 24
    assert publisher.thread is not None
    assert 1 <= publisher.thread.batches <= 8


def test_only_a_broker_kombu_can_batch_gets_the_publishing_thread(redis_url: str) -> None:
    """Redis: batched. RabbitMQ: each publish waits for its own confirm, so the requests
    keep publishing on their own threads (one thread would add the waits up)."""
    from tidegate.intake.batching import can_batch

    redis_app = Celery("tidegate-batch-redis", broker=redis_url)
    amqp_app = Celery("tidegate-batch-amqp", broker="amqp://guest:guest@127.0.0.1:5672//")
    try:
        assert can_batch(redis_app)
        assert not can_batch(amqp_app)
    finally:
        redis_app.close()
        amqp_app.close()
