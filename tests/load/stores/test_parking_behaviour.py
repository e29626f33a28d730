"""What the parking lot promises, on the memory twin and on a real Redis.

Messages wait by due time, invisible until due; a claim is a lease: a mover that dies
between claim and republish loses nothing (the message is due again once the lease
expires), and two movers never get the same message.
"""

from __future__ import annotations

import threading

import pytest
from structlog.testing import capture_logs

from tidegate.flow.backends.memory import ManualClock
from tidegate.load.parking import CLAIM_LEASE_MS
from tidegate.load.protocols import ParkingStore

LEASE_S = CLAIM_LEASE_MS / 1000.0


def test_a_parked_message_is_invisible_until_due(parking: ParkingStore, clock: ManualClock) -> None:
    """Not due → not claimable; due → claimed once, and gone after ack."""
    later = parking.park({"task": "edi.customs.submit", "args": [1]}, delay_s=60, reason="paused")
    due_id = parking.park({"task": "edi.tos.push", "args": [2]}, delay_s=0, reason="gate_rate")

    claimed = parking.claim_due()
    again = parking.claim_due()
    parking.ack(claimed[0].id)

    assert [(m.id, m.envelope["args"]) for m in claimed] == [(due_id, [2])]
    assert again == []
    assert parking.depth() == 1
    assert parking.next_due_in_s() == 60.0
    clock.advance(60)
    assert [m.id for m in parking.claim_due()] == [later]


def test_due_messages_are_claimed_earliest_due_first_up_to_the_limit(
    parking: ParkingStore, clock: ManualClock
) -> None:
    """Due order, not parking order; the limit bounds one claim, the rest waits."""
    ids = {
        delay: parking.park({"task": "t", "n": delay}, delay_s=delay, reason="r")
        for delay in (30, 10, 20)
    }
    clock.advance(25)

    first = parking.claim_due(1)
    second = parking.claim_due(10)
    clock.advance(5)
    third = parking.claim_due(10)

    assert [m.id for m in first] == [ids[10]]
    assert [m.id for m in second] == [ids[20]]
    assert [m.id for m in third] == [ids[30]]


def test_a_claim_not_acked_comes_back_after_its_lease(
    parking: ParkingStore, clock: ManualClock
) -> None:
    """A mover that dies between claim and republish loses nothing; until the lease
    has expired, nobody else takes the message."""
    message_id = parking.park({"task": "t"}, delay_s=0, reason="test")
    (claimed,) = parking.claim_due()
    clock.advance(LEASE_S - 1)
    during = parking.claim_due()
    depth = parking.depth()
    clock.advance(1)

    reclaimed = parking.claim_due()

    assert claimed.id == message_id
    assert during == []
    assert depth == 1
    assert [m.id for m in reclaimed] == [message_id]
    assert reclaimed[0].envelope == {"task": "t"}


def test_an_acked_claim_never_comes_back(parking: ParkingStore, clock: ManualClock) -> None:
    parking.park({"task": "t"}, delay_s=0, reason="test")
    (claimed,) = parking.claim_due()
    parking.ack(claimed.id)
    clock.advance(LEASE_S * 2)

    assert parking.claim_due() == []
    assert parking.depth() == 0
    assert parking.next_due_in_s() is None


def test_an_expired_claim_is_due_again_behind_earlier_messages(
    parking: ParkingStore, clock: ManualClock
) -> None:
    """A reclaimed message is due from the moment its lease was found expired, so a
    message that fell due before that is moved first."""
    first = parking.park({"task": "t", "n": 1}, delay_s=0, reason="test")
    (claimed,) = parking.claim_due()
    clock.advance(LEASE_S / 2)
    second = parking.park({"task": "t", "n": 2}, delay_s=0, reason="test")
    clock.advance(LEASE_S / 2 + 1)

    moved = [m.id for m in parking.claim_due(1)]

    assert claimed.id == first
    assert moved == [second]
    assert [m.id for m in parking.claim_due(1)] == [first]


def test_two_movers_never_claim_the_same_message(
    parking: ParkingStore, other_parking: ParkingStore, clock: ManualClock
) -> None:
    """Two claimers (two clients on Redis) split the due messages between them."""
    ids = {parking.park({"task": "t", "n": n}, delay_s=0, reason="r") for n in range(10)}

    a = [m.id for m in parking.claim_due(4)]
    b = [m.id for m in other_parking.claim_due(10)]
    clock.advance(LEASE_S - 1)
    c = parking.claim_due(10)

    assert len(a) == 4
    assert len(b) == 6
    assert set(a) | set(b) == ids
    assert not set(a) & set(b)
    assert c == []


def test_next_due_counts_down_on_the_clock_and_stops_at_zero(
    parking: ParkingStore, clock: ManualClock
) -> None:
    assert parking.next_due_in_s() is None
    parking.park({"task": "t"}, delay_s=90, reason="r")
    parking.park({"task": "t"}, delay_s=30, reason="r")
    clock.advance(10)
    assert parking.next_due_in_s() == 20.0
    clock.advance(45)
    assert parking.next_due_in_s() == 0.0


def test_the_keys_of_parked_messages_are_listed_once_each(parking: ParkingStore) -> None:
    """The orphan sweep's view: every parked idempotency key, claimed ones too;
    envelopes without a key are passed over."""
    for n in range(5):
        parking.park({"task": "t", "key": f"k{n}"}, delay_s=n, reason="r")
    parking.park({"task": "t"}, delay_s=0, reason="r")
    parking.claim_due(10)

    pages = list(parking.iter_keys(2))

    assert sorted(key for page in pages for key in page) == ["k0", "k1", "k2", "k3", "k4"]
    assert all(pages)


@pytest.mark.parametrize("delay_s", [-5.0, 0.0])
def test_a_negative_delay_parks_as_due_now(
    parking: ParkingStore, clock: ManualClock, delay_s: float
) -> None:
    message_id = parking.park({"task": "t"}, delay_s=delay_s, reason="r")
    assert parking.next_due_in_s() == 0.0
    assert [m.id for m in parking.claim_due()] == [message_id]


def test_parking_logs_one_event_without_the_envelope(parking: ParkingStore) -> None:
    with capture_logs() as logs:
        parking.park({"task": "t", "args": ["UNB+UNOC:3+SECRET'"]}, delay_s=5, reason="gate_paused")
    assert [e["event"] for e in logs] == ["message_parked"]
    assert "SECRET" not in repr(logs)
    assert (logs[0]["reason"], logs[0]["delay_s"]) == ("gate_paused", 5)


def test_two_movers_racing_on_threads_move_every_message_exactly_once(
    parking: ParkingStore, other_parking: ParkingStore
) -> None:
    """Two threads (two clients on Redis), one barrier, small claims until the lot is
    empty: the union is every message, and no message is in both."""
    ids = {parking.park({"task": "t", "n": n}, delay_s=0, reason="r") for n in range(60)}
    start = threading.Barrier(2)
    moved: dict[str, list[str]] = {"a": [], "b": []}

    def mover(name: str, lot: ParkingStore) -> None:
        start.wait(timeout=10)
        while batch := lot.claim_due(3):
            for message in batch:
                moved[name].append(message.id)
                lot.ack(message.id)

    threads = [
        threading.Thread(target=mover, args=(name, lot))
        for name, lot in (("a", parking), ("b", other_parking))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(moved["a"] + moved["b"]) == sorted(ids)
    assert parking.depth() == 0
