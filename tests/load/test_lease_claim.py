"""The one lease-claim script behind the parking lot and the quarantine.

Both stores claim with ``lease_claim.lua``; what differs is said in the call: parking
claims only what is due and puts an expired claim back as due now; the quarantine
claims the oldest and puts an expired claim back at its quarantine time. These tests
pin the behaviour that tells the two apart, on a real Redis.
"""

from __future__ import annotations

import pytest
import redis

from tidegate._redis import lua_script
from tidegate.keys import Keyspace
from tidegate.load import ParkingLot
from tidegate.load.quarantine import Quarantine, QuarantinedDocument

pytestmark = pytest.mark.redis


def _doc(key: str) -> QuarantinedDocument:
    return QuarantinedDocument(
        key=key, document_class="BULK_BL_PDF", queue="bulk.documents", task="t", payload={}
    )


def test_an_expired_quarantine_claim_goes_back_ahead_of_later_documents(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The replayer that died held the oldest document: it is again the first in line."""
    store = Quarantine(redis_client, prefix=prefix)
    store.add(_doc("a"))
    store.add(_doc("b"))
    (first,) = store.claim("bulk.documents", 1)
    redis_client.zadd(Keyspace(prefix).quarantine().inflight("bulk.documents"), {"a": 0})

    claim = store.claim_batch("bulk.documents", 1)

    assert first.key == "a"
    assert [d.key for d in claim.documents] == ["a"]
    assert claim.documents[0].quarantined_at == first.quarantined_at
    assert claim.in_replay == 0


def test_an_expired_parking_claim_is_due_again_behind_earlier_messages(
    redis_client: redis.Redis, prefix: str
) -> None:
    """A reclaimed parked message is due from the moment its lease was found expired, so
    a message that fell due before that is moved first."""
    lot = ParkingLot(redis_client, prefix=prefix)
    first = lot.park({"task": "t", "n": 1}, delay_s=0, reason="test")
    (claimed,) = lot.claim_due()
    second = lot.park({"task": "t", "n": 2}, delay_s=0, reason="test")
    redis_client.zadd(Keyspace(prefix).parking().inflight, {first: 0})

    moved = [m.id for m in lot.claim_due(1)]

    assert claimed.id == first
    assert moved == [second]
    assert [m.id for m in lot.claim_due(1)] == [first]


def test_a_parked_message_not_yet_due_is_not_claimed_while_the_oldest_quarantined_is(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Parking picks by due time; the quarantine picks the oldest whatever its time."""
    lot = ParkingLot(redis_client, prefix=prefix)
    lot.park({"task": "t"}, delay_s=60, reason="test")
    store = Quarantine(redis_client, prefix=prefix)
    store.add(_doc("a"))
    redis_client.zadd(Keyspace(prefix).quarantine().waiting("bulk.documents"), {"a": 9e15})

    assert lot.claim_due(10) == []
    assert [d.key for d in store.claim("bulk.documents", 10)] == ["a"]


def test_the_script_refuses_an_unknown_pick(redis_client: redis.Redis, prefix: str) -> None:
    """A caller that names neither pick gets an error, not a silent empty claim."""
    claim = redis_client.register_script(lua_script("lease_claim", "tidegate.load"))
    keys = Keyspace(prefix).parking()
    with pytest.raises(redis.ResponseError, match="pick"):
        claim([keys.due, keys.inflight, keys.env], ["", 1, 1000, "newest"])
