"""What the quarantine promises, on the memory twin and on a real Redis.

A shed document is kept in full, once per idempotency key, in a FIFO line per queue;
replay is claim → queue → ack under a lease: a replayer that dies loses nothing (the
document goes back at its old place once the lease expires), two replayers never
take one document, and every document ends replayed (counted) or purged (counted).
"""

from __future__ import annotations

from structlog.testing import capture_logs

from tidegate.flow.backends.memory import ManualClock
from tidegate.load.protocols import QuarantineStore
from tidegate.load.quarantine import CLAIM_LEASE_MS, QuarantinedDocument
from tidegate.logging import key_hash

BULK = "bulk.documents"
LEASE_S = CLAIM_LEASE_MS / 1000.0


def doc(key: str, queue: str = BULK, cls: str = "BULK_BL_PDF") -> QuarantinedDocument:
    return QuarantinedDocument(
        key=key,
        document_class=cls,
        queue=queue,
        task="bulk.documents.store",
        payload={"key": key, "body": "archive://bl/1.pdf", "args": []},
        depth=1234,
    )


def test_a_shed_document_is_stored_in_full_and_listed_without_payload(
    quarantine: QuarantineStore, clock: ManualClock
) -> None:
    """Payload, class, queue, task, reason, depth and the store's time are kept; the
    log event and the summary never carry the payload."""
    with capture_logs() as logs:
        stored, new = quarantine.add(doc("k1"))
    (listed,) = list(quarantine.iter())

    assert new
    assert listed == stored
    assert listed.payload == {"key": "k1", "body": "archive://bl/1.pdf", "args": []}
    assert (listed.reason, listed.depth, listed.sender) == ("sustained_overload", 1234, "celery")
    assert listed.quarantined_at == clock.now_ms() / 1000.0 == quarantine.now()
    assert "payload" not in listed.summary()
    (event,) = [e for e in logs if e["event"] == "document_shed"]
    assert "payload" not in event
    assert "key" not in event  # a unit key can be a business identifier
    assert event["key_hash"] == key_hash("k1")
    assert (event["depth"], event["duplicate"]) == (1234, False)


def test_the_same_document_shed_twice_is_one_record(
    quarantine: QuarantineStore, clock: ManualClock
) -> None:
    """Keyed by idempotency key: a producer's retry does not duplicate the document,
    and the record keeps its first quarantine time."""
    first, _ = quarantine.add(doc("k1"))
    clock.advance(30)
    again, new = quarantine.add(doc("k1"))

    assert not new
    assert again.quarantined_at == first.quarantined_at
    assert len(quarantine) == 1
    assert quarantine.depth(BULK) == 1
    assert quarantine.stats()["duplicates"] == 1
    assert quarantine.stats()["shed_total"] == {"BULK_BL_PDF": 1}


def test_replay_claims_oldest_first_and_counts_by_class(
    quarantine: QuarantineStore, clock: ManualClock
) -> None:
    """claim → ack removes and counts; release puts a document back at its place."""
    for key in ("c", "a", "b"):  # quarantine order, not key order, is the line
        quarantine.add(doc(key))
        clock.advance(1)
    quarantine.add(doc("t1", queue="edi.tos", cls="IFTSTA"))

    first_two = quarantine.claim(BULK, 2)
    depth = quarantine.depth(BULK)
    acked = quarantine.ack(first_two[0])
    quarantine.release(first_two[1])

    assert [d.key for d in first_two] == ["c", "a"]
    assert depth == 3  # claimed ones still count until acked
    assert acked
    assert [d.key for d in quarantine.claim(BULK, 5)] == ["a", "b"]
    stats = quarantine.stats()
    assert stats["replayed_total"] == {"BULK_BL_PDF": 1}
    assert stats["by_queue"] == {BULK: 2, "edi.tos": 1}
    assert stats["documents"] == 3
    assert stats["shed_total"] == {"BULK_BL_PDF": 3, "IFTSTA": 1}


def test_documents_shed_in_the_same_millisecond_line_up_by_key(
    quarantine: QuarantineStore,
) -> None:
    """Equal times fall to the key's order (a Redis sorted set's rule), on both."""
    for key in ("k2", "k10", "k1"):
        quarantine.add(doc(key))
    assert [d.key for d in quarantine.iter()] == ["k1", "k10", "k2"]
    assert [d.key for d in quarantine.claim(BULK, 3)] == ["k1", "k10", "k2"]


def test_a_claim_never_acked_goes_back_in_line_ahead_of_later_documents(
    quarantine: QuarantineStore, clock: ManualClock
) -> None:
    """A replayer that died between claim and ack loses nothing: once the lease has
    expired the oldest document is again the first in line, at its old time."""
    quarantine.add(doc("a"))
    clock.advance(1)
    quarantine.add(doc("b"))
    (claimed,) = quarantine.claim(BULK, 1, lease_ms=5_000)
    clock.advance(4.999)
    during = quarantine.claim_batch(BULK, 1)
    quarantine.release(during.documents[0])
    clock.advance(0.001)

    again = quarantine.claim_batch(BULK, 1)

    assert claimed.key == "a"
    assert ([d.key for d in during.documents], during.in_replay) == (["b"], 1)
    assert [d.key for d in again.documents] == ["a"]
    assert again.documents[0].quarantined_at == claimed.quarantined_at
    assert again.in_replay == 0


def test_a_claim_says_how_many_another_replayer_holds(
    quarantine: QuarantineStore, other_quarantine: QuarantineStore
) -> None:
    """The count comes from the same atomic step as the claim; the two claims share
    no document."""
    for n in range(5):
        quarantine.add(doc(f"k{n:02d}"))
    first = quarantine.claim_batch(BULK, 2)

    second = other_quarantine.claim_batch(BULK, 2)
    none = other_quarantine.claim_batch(BULK, 0)

    assert [d.key for d in first.documents] == ["k00", "k01"]
    assert first.in_replay == 0
    assert [d.key for d in second.documents] == ["k02", "k03"]
    assert second.in_replay == 2
    assert (none.documents, none.in_replay) == ([], 4)


def test_an_ack_after_the_lease_expired_still_settles_the_document(
    quarantine: QuarantineStore, clock: ManualClock
) -> None:
    """The document *was* queued: a late ack removes it from the line it went back
    to, so no later replay queues it twice; a second ack is a no-op."""
    quarantine.add(doc("a"))
    (claimed,) = quarantine.claim(BULK, 1)
    clock.advance(LEASE_S + 1)
    assert quarantine.claim_batch(BULK, 0).in_replay == 1  # nothing reclaimed it yet

    first = quarantine.ack(claimed)
    second = quarantine.ack(claimed)

    assert (first, second) == (True, False)
    assert quarantine.claim(BULK, 5) == []
    assert quarantine.depth(BULK) == 0
    assert len(quarantine) == 0
    assert quarantine.stats()["replayed_total"] == {"BULK_BL_PDF": 1}


def test_listing_is_oldest_first_per_queue_and_skips_claimed_documents(
    quarantine: QuarantineStore, clock: ManualClock
) -> None:
    quarantine.add(doc("t1", queue="edi.tos", cls="IFTSTA"))
    for key in ("b2", "b1", "b3"):
        clock.advance(1)
        quarantine.add(doc(key))
    quarantine.claim(BULK, 1)

    assert [d.key for d in quarantine.iter()] == ["b1", "b3", "t1"]
    assert [d.key for d in quarantine.iter(queue="edi.tos")] == ["t1"]
    assert [d.key for d in quarantine.iter(limit=1)] == ["b1"]
    assert quarantine.queues() == [BULK, "edi.tos"]
    assert quarantine.depth_by_queue() == {BULK: 3, "edi.tos": 1}


def test_ages_follow_the_clock(quarantine: QuarantineStore, clock: ManualClock) -> None:
    """The oldest waiting document's age, on the store's clock."""
    assert quarantine.stats()["oldest_age_s"] == 0.0
    quarantine.add(doc("a"))
    clock.advance(30)
    quarantine.add(doc("t", queue="edi.tos", cls="IFTSTA"))
    clock.advance(60.5)

    stats = quarantine.stats()
    (listed,) = list(quarantine.iter(queue="edi.tos"))

    assert stats["oldest_age_s"] == 90.5
    assert quarantine.now() - listed.quarantined_at == 60.5


def test_purge_deletes_and_reports(quarantine: QuarantineStore) -> None:
    """purge returns how many documents went, per queue or all, claimed ones too."""
    for key in ("a", "b"):
        quarantine.add(doc(key))
    quarantine.add(doc("t", queue="edi.tos", cls="IFTSTA"))
    quarantine.claim(BULK, 1)

    with capture_logs() as logs:
        per_queue = quarantine.purge(queue="edi.tos")
    rest = quarantine.purge()

    assert (per_queue, rest) == (1, 2)
    assert len(quarantine) == 0
    assert quarantine.queues() == []
    assert quarantine.stats()["purged"] == 3
    assert quarantine.stats()["documents"] == 0
    assert [e["event"] for e in logs] == ["quarantine_purged"]
    quarantine.add(doc("a"))  # a purged key is new again
    assert [d.key for d in quarantine.claim(BULK, 5)] == ["a"]


def test_a_listing_gives_at_most_its_limit(quarantine: QuarantineStore) -> None:
    """``limit=0`` lists nothing (it used to list one document)."""
    for i in range(3):
        quarantine.add(doc(f"k{i}"))

    assert [len(list(quarantine.iter(limit=n))) for n in (0, 1, 2, 5)] == [0, 1, 2, 3]
