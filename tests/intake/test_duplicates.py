"""The duplicate window: one behaviour suite on the Redis store and its memory twin."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis

from tidegate.errors import ConfigurationError
from tidegate.intake import Claim, MemoryDuplicates, RedisDuplicates
from tidegate.intake.duplicates import DuplicateStore
from tidegate.keys import Keyspace


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(
    params=["memory", pytest.param("redis", marks=pytest.mark.redis)],
)
def store(request: pytest.FixtureRequest, prefix: str, clock: FakeClock) -> DuplicateStore:
    if request.param == "memory":
        return MemoryDuplicates(prefix=prefix, clock=clock, wall_ms=lambda: 1_700_000_000_000)
    client: redis.Redis = request.getfixturevalue("redis_client")
    return RedisDuplicates(client, prefix=prefix, wall_ms=lambda: 1_700_000_000_000)


def test_a_new_interchange_is_claimed_and_a_confirmed_one_is_a_duplicate(store) -> None:
    """Claim, confirm, and the next copy is a duplicate with the first one's time."""
    assert store.claim("ACME", "REF1", "t1").claim is Claim.NEW
    assert store.confirm("ACME", "REF1", "t1") is True
    again = store.claim("ACME", "REF1", "t2")
    assert again.claim is Claim.DUPLICATE
    assert again.accepted_at_ms == 1_700_000_000_000


def test_a_copy_arriving_while_the_first_is_published_is_in_flight(store) -> None:
    """Not a duplicate yet (the first may still fail), so the sender is told to retry."""
    store.claim("ACME", "REF1", "t1")
    second = store.claim("ACME", "REF1", "t2")
    assert second.claim is Claim.IN_FLIGHT
    assert 0 < second.lease_left_ms <= 120_000


def test_a_released_claim_lets_the_retry_claim_again(store) -> None:
    """Nothing acknowledged means nothing remembered; another token cannot release."""
    store.claim("ACME", "REF1", "t1")
    assert store.release("ACME", "REF1", "other") is False
    assert store.claim("ACME", "REF1", "t2").claim is Claim.IN_FLIGHT
    assert store.release("ACME", "REF1", "t1") is True
    assert store.claim("ACME", "REF1", "t2").claim is Claim.NEW


def test_release_never_drops_an_accepted_record(store) -> None:
    """Only a pending claim of the same token is released."""
    store.claim("ACME", "REF1", "t1")
    store.confirm("ACME", "REF1", "t1")
    assert store.release("ACME", "REF1", "t1") is False
    assert store.claim("ACME", "REF1", "t3").claim is Claim.DUPLICATE


def test_the_sender_and_reference_together_identify_an_interchange(store) -> None:
    """Another sender's REF1, or ACME's REF2, is new; length-prefixing keeps
    ``("AB", "C")`` and ``("A", "BC")`` apart."""
    store.claim("ACME", "REF1", "t1")
    store.confirm("ACME", "REF1", "t1")
    assert store.claim("OTHER", "REF1", "t2").claim is Claim.NEW
    assert store.claim("ACME", "REF2", "t3").claim is Claim.NEW
    store.claim("AB", "C", "t4")
    assert store.claim("A", "BC", "t5").claim is Claim.NEW


def test_a_confirm_after_the_claim_lapsed_still_records(store) -> None:
    """The units are on the broker whoever claimed since: later copies are duplicates."""
    assert store.confirm("ACME", "REF9", "never-claimed") is False
    assert store.claim("ACME", "REF9", "t2").claim is Claim.DUPLICATE


def test_concurrent_claims_of_one_interchange_make_one_winner(store) -> None:
    """Eight threads claim at once: exactly one gets to publish."""
    barrier = threading.Barrier(8)
    verdicts: list[Claim] = []
    lock = threading.Lock()

    def claim(token: str) -> None:
        barrier.wait()
        verdict = store.claim("ACME", "RACE", token).claim
        with lock:
            verdicts.append(verdict)

    threads = [threading.Thread(target=claim, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(v.value for v in verdicts) == ["in_flight"] * 7 + ["new"]


def test_memory_claims_and_records_expire_on_the_injected_clock(clock: FakeClock) -> None:
    """A crashed request's claim lapses after the lease; a record after the window."""
    store = MemoryDuplicates(window_ms=10_000, lease_ms=2_000, clock=clock)
    store.claim("ACME", "REF1", "t1")
    clock.now += 2.5
    assert store.claim("ACME", "REF1", "t2").claim is Claim.NEW
    store.confirm("ACME", "REF1", "t2")
    clock.now += 9.0
    assert store.claim("ACME", "REF1", "t3").claim is Claim.DUPLICATE
    clock.now += 1.5
    assert store.claim("ACME", "REF1", "t3").claim is Claim.NEW


@pytest.mark.redis
def test_redis_keys_expire_after_the_lease_and_the_window(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The TTLs Redis holds are the lease while pending and the window once accepted."""
    store = RedisDuplicates(redis_client, prefix=prefix, window_ms=86_400_000, lease_ms=5_000)
    key = Keyspace(prefix).interchange("ACME", "REF1")
    store.claim("ACME", "REF1", "t1")
    assert 0 < redis_client.pttl(key) <= 5_000
    store.confirm("ACME", "REF1", "t1")
    assert 5_000 < redis_client.pttl(key) <= 86_400_000


@pytest.mark.parametrize("factory", [MemoryDuplicates])
def test_a_window_or_lease_below_one_ms_is_refused(factory: Callable[..., object]) -> None:
    """A zero or fractional window would remember nothing (or fail inside Redis)."""
    with pytest.raises(ConfigurationError, match="window_ms"):
        factory(window_ms=0)
    with pytest.raises(ConfigurationError, match="lease_ms"):
        factory(lease_ms=1.5)
