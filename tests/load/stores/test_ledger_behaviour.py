"""The delivery ledger's promises, held on the memory twin and on Redis alike:
new → sending → delivered (or refused), never back; send times from the store's
clock; every entry forgotten ``ttl_s`` after its last write."""

from __future__ import annotations

from typing import Any

import pytest

from tidegate.flow.backends import ManualClock
from tidegate.keys import Keyspace
from tidegate.load.ledger import DeliveryState
from tidegate.load.memory import MemoryLedger
from tidegate.load.protocols import LedgerStore

T0 = 1_700_000_000_000.0


def expires_in_s(store: Any, downstream: str, key: str) -> float | None:
    """Seconds until ``key``'s ledger entry is forgotten, ``None`` without one.

    The Redis store's TTL runs on the server's clock, not the manual one, so the suite
    reads it (``PTTL``) rather than advancing the clock past it.
    """
    if isinstance(store, MemoryLedger):
        return store.expires_in_s(downstream, key)
    ms = store.client.pttl(Keyspace(store.prefix).delivered(downstream, key))
    return None if ms < 0 else ms / 1000.0


def test_both_stores_are_ledger_stores(ledger: LedgerStore) -> None:
    assert isinstance(ledger, LedgerStore)


def test_a_key_moves_from_new_to_sending_to_delivered(ledger: LedgerStore) -> None:
    assert ledger.state("tos", "K-1") is DeliveryState.NEW
    ledger.sending("tos", "K-1")
    assert ledger.state("tos", "K-1") is DeliveryState.SENDING
    assert not ledger.delivered("tos", "K-1")
    ledger.mark("tos", "K-1")
    assert ledger.state("tos", "K-1") is DeliveryState.DELIVERED
    assert ledger.delivered("tos", "K-1")
    # Another downstream has its own record of the same key.
    assert ledger.state("customs", "K-1") is DeliveryState.NEW


def test_sending_never_downgrades_a_delivered_key(ledger: LedgerStore) -> None:
    """A duplicate message starting late must not make a delivered unit look uncertain."""
    ledger.mark("tos", "K-2")
    assert ledger.sending("tos", "K-2") is None
    entry = ledger.entry("tos", "K-2")
    assert (entry.state, entry.sent_at_ms) == (DeliveryState.DELIVERED, None)


def test_sending_keeps_when_each_attempt_started_on_the_clock(
    ledger: LedgerStore, clock: ManualClock
) -> None:
    assert ledger.sending("tos", "K-3") == T0
    clock.advance(2.5)
    assert ledger.sending("tos", "K-3") == T0 + 2_500  # a later attempt moves it on
    clock.advance(1.0)
    entry = ledger.entry("tos", "K-3")
    assert entry.state is DeliveryState.SENDING
    assert entry.sent_at_ms == T0 + 2_500
    assert entry.now_ms == T0 + 3_500
    assert entry.in_doubt is False


def test_a_new_key_reads_as_new_with_the_clock(ledger: LedgerStore, clock: ManualClock) -> None:
    clock.advance(7.0)
    entry = ledger.entry("tos", "K-4")
    assert (entry.state, entry.sent_at_ms, entry.now_ms) == (DeliveryState.NEW, None, T0 + 7_000)


def test_a_refused_attempt_stays_sending_with_time_zero(ledger: LedgerStore) -> None:
    """Nothing of a refused attempt can still be running downstream; an earlier one may
    have landed, so the entry stays ``sending``."""
    ledger.sending("tos", "K-5")
    ledger.refused("tos", "K-5")
    entry = ledger.entry("tos", "K-5")
    assert (entry.state, entry.sent_at_ms) == (DeliveryState.SENDING, 0.0)


def test_refused_spares_a_delivered_key(ledger: LedgerStore) -> None:
    ledger.mark("tos", "K-6")
    ledger.refused("tos", "K-6")
    assert ledger.state("tos", "K-6") is DeliveryState.DELIVERED


@pytest.mark.parametrize("write", ["sending", "refused", "mark"])
def test_every_write_lives_ttl_s(ledger: LedgerStore, write: str) -> None:
    assert expires_in_s(ledger, "tos", "K-7") is None
    getattr(ledger, write)("tos", "K-7")
    remaining = expires_in_s(ledger, "tos", "K-7")
    assert remaining is not None
    assert ledger.ttl_s - 2 < remaining <= ledger.ttl_s


def test_a_write_renews_the_entrys_lifetime(ledger: LedgerStore, clock: ManualClock) -> None:
    """Marking delivered long after ``sending`` still keeps the mark a full ``ttl_s``."""
    ledger.sending("tos", "K-8")
    clock.advance(60)
    ledger.mark("tos", "K-8")
    remaining = expires_in_s(ledger, "tos", "K-8")
    assert remaining is not None
    assert remaining > ledger.ttl_s - 2


def test_the_memory_twin_forgets_an_entry_ttl_s_later_on_its_clock(clock: ManualClock) -> None:
    """Redis drops a key when its TTL runs out; the twin does the same on its clock."""

    twin = MemoryLedger(ttl_s=120, clock=clock.now_ms)
    twin.mark("tos", "K-9")
    clock.advance(120 - 0.001)
    assert twin.delivered("tos", "K-9")
    clock.advance(0.001)
    assert twin.state("tos", "K-9") is DeliveryState.NEW
    assert twin.expires_in_s("tos", "K-9") is None


def test_send_times_keep_a_microsecond_resolution_on_both_stores(
    ledger: LedgerStore, clock: ManualClock
) -> None:
    """The stored form keeps ms with three decimals; both stores round the same way."""
    clock.advance(0.0123456)
    sent = ledger.sending("tos", "K-10")
    assert sent == T0 + 12.346
    assert ledger.entry("tos", "K-10").sent_at_ms == T0 + 12.346
