"""The quarantine and the load board, against a real Redis (the live watermarks'
behaviour is in tests/load/stores/test_watermarks_behaviour.py, on both stores)."""

from __future__ import annotations

import pytest
import redis
from structlog.testing import capture_logs

from tidegate.keys import Keyspace
from tidegate.load.depth import QueueDepth
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import (
    BoardEntry,
    LoadBoard,
    LoadState,
    Watermarks,
    advance,
)

pytestmark = pytest.mark.redis


def doc(key: str, queue: str = "bulk.documents", cls: str = "BULK_BL_PDF") -> QuarantinedDocument:
    return QuarantinedDocument(
        key=key,
        document_class=cls,
        queue=queue,
        task="bulk.documents.store",
        payload={"key": key, "body": "archive://bl/1.pdf", "args": []},
        depth=1234,
    )


def test_a_shed_document_is_stored_in_full_and_listed_without_payload(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Payload, class, queue, task, reason, depth and the Redis-clock time are kept;
    the log event and the summary never carry the payload."""
    store = Quarantine(redis_client, prefix=prefix)
    with capture_logs() as logs:
        stored, new = store.add(doc("k1"))
    (listed,) = list(store.iter())
    assert new
    assert listed == stored
    assert listed.payload == {"key": "k1", "body": "archive://bl/1.pdf", "args": []}
    assert (listed.reason, listed.depth, listed.sender) == ("sustained_overload", 1234, "celery")
    assert abs(listed.quarantined_at - store.now()) < 5
    assert "payload" not in listed.summary()
    (event,) = [e for e in logs if e["event"] == "document_shed"]
    assert "payload" not in event
    assert event["depth"] == 1234


def test_the_same_document_shed_twice_is_one_record(redis_client: redis.Redis, prefix: str) -> None:
    """Keyed by idempotency key: a producer's retry does not duplicate the document."""
    store = Quarantine(redis_client, prefix=prefix)
    first, _ = store.add(doc("k1"))
    again, new = store.add(doc("k1"))
    assert not new
    assert again.quarantined_at == first.quarantined_at
    assert len(store) == 1
    assert store.stats()["duplicates"] == 1
    assert store.stats()["shed_total"] == {"BULK_BL_PDF": 1}


def test_replay_claims_oldest_first_and_counts_by_class(
    redis_client: redis.Redis, prefix: str
) -> None:
    """claim → ack removes and counts; release puts a document back at its place."""
    store = Quarantine(redis_client, prefix=prefix)
    for key in ("a", "b", "c"):
        store.add(doc(key))
    store.add(doc("t1", queue="edi.tos", cls="IFTSTA"))
    first_two = store.claim("bulk.documents", 2)
    assert [d.key for d in first_two] == ["a", "b"]
    assert store.depth("bulk.documents") == 3  # claimed ones still count until acked
    assert store.ack(first_two[0])
    store.release(first_two[1])
    assert [d.key for d in store.claim("bulk.documents", 5)] == ["b", "c"]
    stats = store.stats()
    assert stats["replayed_total"] == {"BULK_BL_PDF": 1}
    assert stats["by_queue"] == {"bulk.documents": 2, "edi.tos": 1}
    assert stats["shed_total"] == {"BULK_BL_PDF": 3, "IFTSTA": 1}


def test_a_claim_never_acked_goes_back_in_line(redis_client: redis.Redis, prefix: str) -> None:
    """A replayer that died between claim and ack loses nothing: the lease expires."""
    store = Quarantine(redis_client, prefix=prefix)
    store.add(doc("a"))
    (claimed,) = store.claim("bulk.documents", 1, lease_ms=1)
    redis_client.zadd(Keyspace(prefix).quarantine().inflight("bulk.documents"), {"a": 0})
    (again,) = store.claim("bulk.documents", 1)
    assert again.key == claimed.key == "a"
    assert again.quarantined_at == claimed.quarantined_at


def test_purge_deletes_and_reports(redis_client: redis.Redis, prefix: str) -> None:
    """purge returns how many documents went, per queue or all."""
    store = Quarantine(redis_client, prefix=prefix)
    for key in ("a", "b"):
        store.add(doc(key))
    store.add(doc("t", queue="edi.tos", cls="IFTSTA"))
    assert store.purge(queue="edi.tos") == 1
    assert store.purge() == 2
    assert len(store) == 0
    assert store.stats()["purged"] == 3


def test_the_board_carries_the_state_and_its_age(redis_client: redis.Redis, prefix: str) -> None:
    """What the monitor publishes is read back whole, aged on the Redis clock."""
    board = LoadBoard(redis_client, prefix=prefix)
    marks = Watermarks(hwm=10, lwm=2, shed_after=1)
    state = advance(LoadState("q"), 50, marks)
    now = board.now_ms()
    board.publish([BoardEntry(state, QueueDepth("q", 45, 5), marks, None, now - 4000, 1.0)])
    entry = board.read(["q", "absent"])["q"]
    assert entry.state == state
    assert (entry.depth.ready, entry.depth.unacked) == (45, 5)
    assert 4.0 <= entry.age_s < 10
    assert not entry.fresh()  # 4 s old with a 1 s interval: stale
    assert board.read() == {"q": entry}
