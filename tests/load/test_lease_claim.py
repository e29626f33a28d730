"""The one lease-claim script behind the parking lot and the quarantine.

Both stores claim with ``lease_claim.lua``; what differs is said in the call: parking
claims only what is due and puts an expired claim back as due now; the quarantine
claims the oldest and puts an expired claim back at its quarantine time. These tests
pin, on a real Redis, what only the script shows (a place in line set by hand, an
unknown pick); how an expired claim goes back in line is behaviour, and runs on Redis
and the memory twins in ``tests/load/stores/``.
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
