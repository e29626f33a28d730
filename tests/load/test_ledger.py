"""The delivery ledger on a real Redis: new → sending → delivered, never back."""

from __future__ import annotations

import pytest
import redis

from tidegate.errors import BackendUnavailable
from tidegate.load import DeliveryLedger, DeliveryState

pytestmark = pytest.mark.redis


def test_a_key_moves_from_new_to_sending_to_delivered(
    redis_client: redis.Redis, prefix: str
) -> None:
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    assert ledger.state("tos", "K-1") is DeliveryState.NEW
    ledger.sending("tos", "K-1")
    assert ledger.state("tos", "K-1") is DeliveryState.SENDING
    assert not ledger.delivered("tos", "K-1")
    ledger.mark("tos", "K-1")
    assert ledger.state("tos", "K-1") is DeliveryState.DELIVERED
    assert ledger.delivered("tos", "K-1")
    # Another downstream has its own record of the same key.
    assert ledger.state("customs", "K-1") is DeliveryState.NEW


def test_sending_never_downgrades_a_delivered_key(redis_client: redis.Redis, prefix: str) -> None:
    """A duplicate message starting late must not make a delivered unit look uncertain."""
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    ledger.mark("tos", "K-2")
    ledger.sending("tos", "K-2")
    assert ledger.state("tos", "K-2") is DeliveryState.DELIVERED


def test_every_record_expires(redis_client: redis.Redis, prefix: str) -> None:
    ledger = DeliveryLedger(redis_client, prefix=prefix, ttl_s=120)
    ledger.sending("tos", "K-3")
    ledger.mark("tos", "K-4")
    ttls = [redis_client.ttl(k) for k in redis_client.scan_iter(match=f"{prefix}:delivered:*")]
    assert len(ttls) == 2
    assert all(0 < t <= 120 for t in ttls)


def test_an_unreachable_redis_is_a_typed_error() -> None:
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    with pytest.raises(BackendUnavailable):
        DeliveryLedger(client).state("tos", "K-5")
