"""Parking and the dead-letter queue against a real Redis."""

from __future__ import annotations

import time

import pytest
import redis
from structlog.testing import capture_logs

from tidegate.keys import Keyspace
from tidegate.load import DeadLetter, DeadLetterQueue, ParkingLot
from tidegate.load.parking import CLAIM_LEASE_MS

pytestmark = pytest.mark.redis


def test_parked_message_is_invisible_until_due(redis_client: redis.Redis, prefix: str) -> None:
    """Not due → not claimable; due → claimed once, and gone after ack."""
    lot = ParkingLot(redis_client, prefix=prefix)
    lot.park({"task": "edi.customs.submit", "args": [1]}, delay_s=60, reason="gate_paused")
    due_id = lot.park({"task": "edi.tos.push", "args": [2]}, delay_s=0, reason="gate_rate")

    claimed = lot.claim_due()
    again = lot.claim_due()
    lot.ack(claimed[0].id)

    assert [(m.id, m.envelope["args"]) for m in claimed] == [(due_id, [2])]
    assert again == []
    assert lot.depth() == 1
    assert 59 < (lot.next_due_in_s() or 0) <= 60


def test_a_claim_not_acked_comes_back_after_its_lease(
    redis_client: redis.Redis, prefix: str
) -> None:
    """A mover that dies between claim and republish loses nothing."""
    lot = ParkingLot(redis_client, prefix=prefix)
    message_id = lot.park({"task": "t"}, delay_s=0, reason="test")
    (claimed,) = lot.claim_due()
    # Age the claim past its lease instead of waiting 30 s for it.
    inflight = Keyspace(prefix).parking().inflight
    redis_client.zincrby(inflight, -(CLAIM_LEASE_MS + 1000), message_id)

    reclaimed = lot.claim_due()

    assert claimed.id == message_id
    assert [m.id for m in reclaimed] == [message_id]


def test_dead_letter_keeps_one_record_per_key(redis_client: redis.Redis, prefix: str) -> None:
    """The same unit dead-lettered twice is one record with attempts counting up."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    letter = DeadLetter(
        key="k1",
        task="bulk.parse_bl",
        reason="no B/L",
        bl_number=None,
        payload={"raw": "CNI+1'"},
        batch_id="b1",
    )
    first = dlq.add(letter)
    second = dlq.add(letter)

    assert len(dlq) == 1
    assert second.attempts == 2
    assert second.first_failed_at == first.first_failed_at
    assert dlq.get("k1") == second
    assert dlq.stats()["dead_lettered_total"] == 2


def test_dlq_filters_and_fifo_order(redis_client: redis.Redis, prefix: str) -> None:
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    for i, reason in enumerate(["no B/L in consignment", "HTTP 422", "no B/L in consignment"]):
        dlq.add(
            DeadLetter(
                key=f"k{i}",
                task="t",
                reason=reason,
                batch_id=f"b{i % 2}",
                first_failed_at=1000.0 + i,
            )
        )

    assert [x.key for x in dlq.iter()] == ["k0", "k1", "k2"]
    assert [x.key for x in dlq.iter(reason="b/l")] == ["k0", "k2"]
    assert [x.key for x in dlq.iter(batch_id="b1")] == ["k1"]
    assert [x.key for x in dlq.iter(limit=1)] == ["k0"]


def test_expiry_is_counted_and_reported(redis_client: redis.Redis, prefix: str) -> None:
    """Retention removes old records, and says how many: nothing expires silently."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    dlq.add(DeadLetter(key="old", task="t", reason="r", first_failed_at=time.time() - 3600))
    dlq.add(DeadLetter(key="new", task="t", reason="r"))

    with capture_logs() as logs:
        expired = dlq.expire(older_than_s=600)

    assert expired == 1
    assert [x.key for x in dlq.iter()] == ["new"]
    assert dlq.stats()["expired_total"] == 1
    assert {"event": "dlq_records_expired", "records": 1}.items() <= logs[0].items()


def test_dead_letter_log_never_carries_the_payload(redis_client: redis.Redis, prefix: str) -> None:
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    with capture_logs() as logs:
        dlq.add(
            DeadLetter(key="k", task="t", reason="HTTP 422", payload={"body": "UNB+UNOC:3+SECRET'"})
        )
    assert "SECRET" not in repr(logs)
    assert logs[0]["event"] == "task_dead_lettered"
