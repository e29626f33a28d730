"""The gate when Redis fails over: its state lost (a fresh server) or read-only (a
demoted primary). The decided behaviour (README, "Redis failover and the gate"):

- **rate (GCRA).** A lost ``tat`` is a full bucket: at most one extra ``burst`` is
  admitted, once, at the failover; from then on every window of ``t`` seconds admits
  at most ``burst + rate × t`` again.
- **concurrency (leases).** Lost leases free every slot while their holders still run.
  A holder learns it at its next renewal (every ``lease_s / 3``): when its own clock
  says its lease is still valid, an absent lease can only mean lost state (a reclaim
  removes expired leases only), so the renewal puts it back. Within one renewal period
  the count is the truth again and the gate admits nobody above the cap.
- **fail closed.** A server that refuses writes (a replica, ``READONLY``) or is gone
  refuses admissions; only ``fail_open=True`` admits without Redis.

Each test has its own embedded Redis (it is flushed or demoted) and a manual clock,
so the real Lua scripts decide and nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from structlog.testing import capture_logs

from tidegate.errors import BackendUnavailable, BackendUnwritable
from tidegate.flow import ConcurrencyLimiter, Gate
from tidegate.flow.backends import ManualClock
from tidegate.flow.backends.redis import RedisBackend
from tidegate.redis_server import EmbeddedRedis
from tidegate.settings import GatePolicy

pytestmark = [pytest.mark.redis]

RATE, BURST, LEASE_S = 2.0, 3, 6.0


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    srv = EmbeddedRedis().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: EmbeddedRedis) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(server.url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_700_000_000_000.0)


def _admitted_over(gate: Gate, clock: ManualClock, seconds: float, step_s: float = 0.01) -> int:
    """Admissions of a client that tries every ``step_s`` for ``seconds``."""
    admitted = 0
    end = clock.now_ms() + seconds * 1000
    while clock.now_ms() < end:
        decision = gate.try_acquire()
        if decision.allowed:
            admitted += 1
        clock.advance(step_s)
    return admitted


def test_lost_rate_state_admits_one_extra_burst_then_holds_the_cap(
    client: redis.Redis, clock: ManualClock
) -> None:
    policy = GatePolicy(rate=RATE, burst=BURST, concurrency=0)
    gate = Gate(RedisBackend(client, clock=clock), "customs", policy=policy)
    before = _admitted_over(gate, clock, 2.0)
    client.flushall()  # the replica that took over has no gate state at all
    after = _admitted_over(gate, clock, LEASE_S)
    later = _admitted_over(gate, clock, LEASE_S)

    assert before <= BURST + RATE * 2.0 + 1
    # From the failover on, the window is bounded by the cap again ...
    assert after <= BURST + RATE * LEASE_S + 1
    # ... and the excess across it is at most the one bucket that was refilled.
    assert before + after <= 2 * BURST + RATE * (2.0 + LEASE_S) + 1
    # The next lease period admits exactly at the rate (the bucket is spent).
    assert later <= RATE * LEASE_S + 1


def test_lost_leases_are_restored_by_their_holders_within_one_renewal(
    client: redis.Redis, clock: ManualClock
) -> None:
    """Two holders in flight; the state is lost; two newcomers get in (the gate cannot
    know). At the holders' next renewal their leases are back: once the newcomers
    leave, the gate refuses a third while the two old calls still run."""
    sem = ConcurrencyLimiter(RedisBackend(client, clock=clock), "tos", limit=2, lease_s=LEASE_S)
    first, second = sem.acquire(max_wait=0), sem.acquire(max_wait=0)
    assert sem.try_acquire() is None

    client.flushall()
    newcomers = [sem.try_acquire(), sem.try_acquire()]
    assert all(n is not None for n in newcomers)  # the over-admission: within one renewal

    clock.advance(LEASE_S / 3)
    with capture_logs() as events:
        assert first.renew() is True
        assert second.renew() is True
    for newcomer in newcomers:
        assert newcomer is not None
        newcomer.release()

    assert sem.try_acquire() is None  # the two old calls hold the cap again
    assert [e["event"] for e in events] == ["gate_lease_restored", "gate_lease_restored"]
    assert first.release() is True
    assert sem.try_acquire() is not None


def test_an_overrun_lease_that_was_reclaimed_is_not_restored(
    client: redis.Redis, clock: ManualClock
) -> None:
    """The holder's own clock says its lease expired: an absent lease is then one that
    was reclaimed, and the holder is told it lost it, as before."""
    sem = ConcurrencyLimiter(RedisBackend(client, clock=clock), "tos", limit=1, lease_s=LEASE_S)
    holder = sem.acquire(max_wait=0)
    clock.advance(LEASE_S + 1)
    taker = sem.acquire(max_wait=0)  # reclaims the expired lease

    with capture_logs() as events:
        assert holder.renew() is False
    assert [e["event"] for e in events] == ["gate_lease_lost"]
    assert sem.try_acquire() is None  # one holder: the taker
    taker.release()


def test_a_demoted_primary_fails_closed(server: EmbeddedRedis, client: redis.Redis) -> None:
    """Mid-failover the old primary is a replica: writes answer READONLY. The gate
    refuses (typed error), never admits without its count."""
    other = EmbeddedRedis().start()
    try:
        client.execute_command("REPLICAOF", "127.0.0.1", str(other.port))
        policy = GatePolicy(rate=RATE, burst=BURST, concurrency=2)
        gate = Gate(client, "customs", policy=policy)
        with pytest.raises(BackendUnavailable) as info:
            gate.acquire(max_wait=0)
        assert isinstance(info.value, BackendUnwritable)
        assert info.value.cause == "readonly"
        with pytest.raises(BackendUnwritable):
            gate.try_acquire()
        opened = Gate(client, "customs", policy=policy, fail_open=True)
        assert opened.try_acquire().reason == "fail_open"  # only when configured to
    finally:
        client.execute_command("REPLICAOF", "NO", "ONE")
        other.stop()
