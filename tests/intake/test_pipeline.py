"""The pipeline: claim, check the queues, publish, record, in that order."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
import redis
from structlog.testing import capture_logs

from tidegate.errors import BackendUnavailable
from tidegate.intake import (
    Claim,
    Client,
    IntakePipeline,
    MemoryDuplicates,
    MemoryPublisher,
    RedisDuplicates,
    SenderNotPermitted,
    Status,
)
from tidegate.load.admission import Inbound


def _pipeline(duplicates=None, publisher=None) -> IntakePipeline:
    return IntakePipeline(
        duplicates=duplicates if duplicates is not None else MemoryDuplicates(),
        publisher=publisher if publisher is not None else MemoryPublisher(),
        now=lambda: datetime(2026, 3, 4, 5, 6, tzinfo=UTC),
        retry_after_s=9,
    )


class FailingPublisher(MemoryPublisher):
    """Takes ``survive`` units, then the broker goes away."""

    def __init__(self, survive: int) -> None:
        super().__init__()
        self.survive = survive

    def publish(self, units: Sequence[Inbound]) -> None:
        for unit in units:
            if len(self.published) >= self.survive:
                raise BackendUnavailable("broker unreachable")
            self.published.append(unit)


def test_an_accepted_interchange_is_published_once_and_its_repeat_is_a_duplicate(build) -> None:
    """The second copy gets 409 with code 26 and publishes nothing."""
    publisher = MemoryPublisher()
    pipeline = _pipeline(publisher=publisher)
    body = build.interchange(build.vermas(), build.ifcsum())
    first = pipeline.submit(body)
    assert first.status is Status.ACCEPTED
    assert len(publisher.published) == 2
    second = pipeline.submit(body)
    assert second.status is Status.DUPLICATE
    assert "+4+26'" in second.contrl
    assert len(publisher.published) == 2


def test_the_interchange_is_recorded_only_after_every_unit_is_published(build) -> None:
    """While units are being published, another copy is 'in flight', not a duplicate:
    had the record been written first, a crash here would lose the interchange."""
    duplicates = MemoryDuplicates()
    seen: list[Claim] = []

    class Probing(MemoryPublisher):
        def publish(self, units: Sequence[Inbound]) -> None:
            seen.append(duplicates.claim("ACME", "REF1", "probe").claim)
            super().publish(units)

    pipeline = _pipeline(duplicates, Probing())
    assert pipeline.submit(build.interchange(build.vermas())).status is Status.ACCEPTED
    assert seen == [Claim.IN_FLIGHT]
    assert duplicates.claim("ACME", "REF1", "after").claim is Claim.DUPLICATE


def test_a_saturated_queue_gets_503_nothing_published_and_the_retry_goes_through(build) -> None:
    """Retry-After, no unit of any queue published, and the claim dropped so that the
    sender's retry, once the queue has drained, is accepted rather than a duplicate."""
    publisher = MemoryPublisher(saturated={"bulk.dispatch"})
    pipeline = _pipeline(publisher=publisher)
    body = build.interchange(build.vermas(), build.ifcsum())
    refused = pipeline.submit(body)
    assert refused.status is Status.RETRY
    assert refused.http_status == 503
    assert refused.retry_after_s == 9
    assert refused.saturated == ("bulk.dispatch",)
    assert publisher.published == []
    publisher.full.clear()
    assert pipeline.submit(body).status is Status.ACCEPTED
    assert len(publisher.published) == 2


def test_a_broker_failure_midway_answers_retry_and_the_retry_republishes_the_same_keys(
    build,
) -> None:
    """No CONTRL after a partial publish; the retry sends every unit again under the same
    idempotency keys, which is what keeps the downstream exactly-once."""
    publisher = FailingPublisher(survive=1)
    pipeline = _pipeline(publisher=publisher)
    body = build.interchange(build.vermas(), build.ifcsum())
    failed = pipeline.submit(body)
    assert failed.status is Status.RETRY
    assert failed.reason == "backend_unavailable"
    assert failed.contrl is None
    assert len(publisher.published) == 1
    publisher.survive = 10
    assert pipeline.submit(body).status is Status.ACCEPTED
    keys = [u.key for u in publisher.published]
    assert len(keys) == 3
    assert keys[0] == keys[1]


def test_a_failed_record_after_publishing_is_not_acknowledged(build) -> None:
    """Units are on the broker but the record is not: 503 without CONTRL, so the
    sender retries (and the units' idempotency keys absorb the repeat)."""

    class NoConfirm(MemoryDuplicates):
        def confirm(self, sender: str, control_reference: str, token: str) -> bool:
            raise BackendUnavailable("redis went away")

    publisher = MemoryPublisher()
    decision = _pipeline(NoConfirm(), publisher).submit(build.interchange(build.vermas()))
    assert decision.status is Status.RETRY
    assert decision.contrl is None
    assert len(publisher.published) == 1


def test_a_rejected_interchange_is_not_remembered(build) -> None:
    """The corrected copy may reuse the control reference."""
    pipeline = _pipeline()
    bad = build.interchange(build.vermas(container="MSCU1234560"))
    assert pipeline.submit(bad).status is Status.REJECTED
    assert pipeline.submit(build.interchange(build.vermas())).status is Status.ACCEPTED


def test_a_client_may_only_submit_for_senders_it_owns(build) -> None:
    """Refused before the duplicate window is touched: the owner's copy is still new."""
    duplicates = MemoryDuplicates()
    pipeline = _pipeline(duplicates)
    intruder = Client("intruder", frozenset({"OTHER"}))
    with pytest.raises(SenderNotPermitted, match=r"'intruder' may not submit .* 'ACME'"):
        pipeline.submit(build.interchange(build.vermas()), intruder)
    owner = Client("acme", frozenset({"ACME"}))
    assert pipeline.submit(build.interchange(build.vermas()), owner).status is Status.ACCEPTED


def test_one_decision_event_per_request_without_payload(build) -> None:
    """Stable snake_case keys; no segment text, no payload."""
    with capture_logs() as events:
        _pipeline().submit(build.interchange(build.vermas()))
    (event,) = [e for e in events if e["event"] == "intake_decided"]
    assert event["status"] == "accepted"
    assert event["sender"] == "ACME"
    assert event["units"] == 1
    assert event["queues"] == ["edi.customs"]
    assert not any("UNH" in str(value) or "EQD" in str(value) for value in event.values())


@pytest.mark.redis
def test_concurrent_posts_of_one_interchange_publish_once(
    build, redis_client: redis.Redis, prefix: str
) -> None:
    """Eight requests with the same interchange at once, against the Redis window: one
    is accepted and publishes; the others are duplicates or told to retry."""
    publisher = MemoryPublisher()
    pipeline = _pipeline(RedisDuplicates(redis_client, prefix=prefix), publisher)
    body = build.interchange(build.vermas(), build.ifcsum())
    barrier = threading.Barrier(8)
    statuses: list[str] = []
    lock = threading.Lock()

    def post() -> None:
        barrier.wait()
        status = pipeline.submit(body).status.value
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses.count("accepted") == 1
    assert set(statuses) <= {"accepted", "duplicate", "retry"}
    assert len(publisher.published) == 2


def test_the_saturation_question_is_asked_only_about_this_interchanges_queues(build) -> None:
    """The admission is not asked about queues no unit goes to."""
    asked: list[list[str]] = []

    class Recording(MemoryPublisher):
        def saturated(self, units: Sequence[Inbound]) -> frozenset[str]:
            asked.append(sorted(u.queue for u in units))
            return super().saturated(units)

    _pipeline(publisher=Recording()).submit(build.interchange(build.vermas()))
    assert asked == [["edi.customs"]]
