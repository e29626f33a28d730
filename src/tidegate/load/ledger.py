"""The delivery ledger: what each downstream has accepted, and what may be in its hands.

Every write carries an idempotency key, and a well-behaved downstream ignores a
repeat. But not every downstream is well-behaved, and a replay or a redelivery after
a crash should not even ask. So a gated task keeps one Redis key per (downstream,
idempotency key), with a TTL so the ledger never grows without bound:

- ``sending`` — written just before the call: the document may now be in the
  downstream's hands. A crash after this point (SIGKILL mid-call, a timeout, Redis
  dying before the next write) leaves the key here;
- ``delivered`` — written once the downstream said yes.

A unit that starts and finds ``sending`` does not know whether its previous attempt
landed; it asks the downstream (a status lookup by idempotency key) before sending
again. That closes the window between "accepted" and "recorded" for downstreams that
can answer the question; for those that cannot, the idempotency key is the last line.

``sending`` keeps the instant (fleet clock, Redis ``TIME``) the attempt started
(:meth:`DeliveryLedger.entry`): a downstream that commits at the end of a slow request
answers a lookup "not received" until that request is over, so the lookup is only
worth asking once the downstream can have finished it.

The ledger is only as durable as Redis: with ``appendfsync everysec`` a host crash
loses up to the last second of writes, ``delivered`` marks included. A record's
absence therefore proves nothing for a message that is not new (a redelivery, a unit
carrying earlier attempts): such a unit asks the downstream too. When the broker is
the same Redis, the lost second also holds the pops of the messages those marks
settled: they come back looking new. So the ledger notices a restart (a new server
``run_id``, ``ledger_entry.lua``) and stays *in doubt* for ``doubt_s`` afterwards
(:attr:`LedgerEntry.in_doubt`): every unit without a record asks first. The record
of the server before is itself one of those writes: lost with it (a crash within a
second of its first write, a server started without its files), the new server would
look like a first sight. So each :class:`DeliveryLedger` remembers the ``run_id``
it last read (and, for ``doubt_s``, the one before a change): one that read another
server before puts the ledger in doubt until ``doubt_s`` after the new one started,
whoever read it first. A process that forks fresh children to run the jobs (RQ's
work horse for every job; Celery's pool children, recycled after
``max_tasks_per_child``) calls :func:`witness_server` before it forks: the children's
ledgers start from what the parent read, where they would otherwise know of no server.

Callers see the ledger through :class:`~tidegate.load.protocols.LedgerStore`;
:class:`DeliveryLedger` is the Redis store, :class:`tidegate.load.memory.MemoryLedger`
its one-process twin (same
behaviour suite, ``tests/load/stores/test_ledger_behaviour.py``). Both take the clock
as a callable (ms since the epoch); without one, the Redis store reads Redis ``TIME``.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable
from typing import NamedTuple

import redis

from tidegate._redis import lua_script, map_redis_errors, script_now_ms, text
from tidegate.errors import ConfigurationError
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = [
    "DEFAULT_LEDGER_DOUBT_S",
    "DEFAULT_LEDGER_TTL_S",
    "DeliveryLedger",
    "DeliveryState",
    "LedgerEntry",
    "parse_entry",
    "witness_server",
]

#: How long a key is remembered: longer than any replay or redelivery.
DEFAULT_LEDGER_TTL_S = 7 * 24 * 3600
#: How long after a Redis restart a unit without a record asks the downstream first:
#: long enough for the fleet to work off what was queued when Redis died.
DEFAULT_LEDGER_DOUBT_S = 900

_DELIVERED = b"1"
_SENDING = b"s"
_SENDING_SINCE = b"s:"


class DeliveryState(enum.Enum):
    """Where one unit stands with one downstream."""

    #: Never sent (or forgotten after the TTL).
    NEW = "new"
    #: Sent at least once without a recorded answer: it may have been accepted.
    SENDING = "sending"
    #: Accepted by the downstream.
    DELIVERED = "delivered"


class LedgerEntry(NamedTuple):
    """One unit's record, read together with the fleet clock.

    ``sent_at_ms``: when the last attempt started (ms since epoch, fleet clock), for a
    ``SENDING`` entry that kept it; ``None`` otherwise. ``now_ms``: Redis ``TIME`` at
    the read, so that ``now_ms - sent_at_ms`` never compares two hosts' clocks.
    ``in_doubt``: Redis restarted less than the ledger's ``doubt_s`` ago, so a missing
    record may be a lost one.
    """

    state: DeliveryState
    sent_at_ms: float | None
    now_ms: float
    in_doubt: bool = False


def parse_entry(value: bytes | str | None) -> tuple[DeliveryState, float | None]:
    """An entry's stored form (``1``, ``s:<ms>``, ``s``; see ``ledger_sending.lua``) as
    its state and send time; shared with the memory twin so both keep the same bytes."""
    if isinstance(value, str):  # a client built with decode_responses=True
        value = value.encode()
    if value is None:
        return DeliveryState.NEW, None
    if value == _DELIVERED:
        return DeliveryState.DELIVERED, None
    if value.startswith(_SENDING_SINCE):
        try:
            return DeliveryState.SENDING, float(value[len(_SENDING_SINCE) :])
        except ValueError:
            pass
    return DeliveryState.SENDING, None


class _Witness:
    """The Redis server (``run_id``) last read at one address, and the one it saw
    replaced there (with when, monotonic seconds: the same clock in a forked child)."""

    __slots__ = ("replaced", "run_id")

    def __init__(self, run_id: str = "", replaced: tuple[str, float] | None = None) -> None:
        self.run_id = run_id
        self.replaced = replaced

    def read(self, run_id: str) -> None:
        if self.run_id and run_id != self.run_id:
            self.replaced = (self.run_id, time.monotonic())
        self.run_id = run_id

    def known(self, doubt_s: float) -> str:
        """``ledger_entry.lua``'s ARGV[3]: the last server read, and one seen replaced
        less than ``doubt_s`` ago."""
        known = [self.run_id]
        if self.replaced is not None and time.monotonic() - self.replaced[1] < doubt_s:
            known.append(self.replaced[0])
        return ",".join(k for k in known if k)


#: What :func:`witness_server` read in this process, per server address; inherited by
#: the children it forks, whose ledgers start from it.
_WITNESSED: dict[str, _Witness] = {}


def _address(client: redis.Redis) -> str:
    """Where ``client`` connects (a Sentinel service by its name), and its database."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    where = getattr(pool, "service_name", None) or kwargs.get("path")
    if not where:
        where = f"{kwargs.get('host')}:{kwargs.get('port')}"
    return f"{where}/{kwargs.get('db', 0)}"


def witness_server(client: redis.Redis) -> None:
    """Read which Redis server ``client`` reaches now, for the children this process
    forks next: each :class:`DeliveryLedger` a child builds on that server starts
    from it.

    A forking worker's child is new with every job, so its ledgers would know of no
    server before the one they meet: after a restart that lost the record of the
    server before (see the module docstring), the first job would take the new server
    for a first sight. The parent lives across the jobs; one ``INFO`` before each fork
    carries what it saw into the next child.

    Raises:
        BackendUnavailable: Redis cannot be reached (the child would fail the same way).
    """
    with map_redis_errors("ledger witness"):
        run_id = text(client.info("server")["run_id"])
    _WITNESSED.setdefault(_address(client), _Witness()).read(run_id)


class DeliveryLedger:
    """Per-downstream delivery state of each idempotency key, in Redis.

    Args:
        client: a sync Redis client.
        prefix: key prefix.
        ttl_s: how long a key is remembered (Redis key TTL, real seconds).
        doubt_s: how long after a Redis restart :meth:`entry` says ``in_doubt``.
        clock: ms since the epoch for send times and :attr:`LedgerEntry.now_ms`;
            ``None`` = Redis ``TIME``, the fleet clock (tests pass a
            :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl_s: int = DEFAULT_LEDGER_TTL_S,
        doubt_s: float = DEFAULT_LEDGER_DOUBT_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not (math.isfinite(doubt_s) and doubt_s >= 0):
            raise ConfigurationError(f"doubt_s must be a finite number >= 0, got {doubt_s!r}")
        self.client = client
        self.prefix = prefix
        self._keys = Keyspace(prefix)
        self.ttl_s = ttl_s
        self.doubt_s = doubt_s
        self._clock = clock
        self._sending = client.register_script(lua_script("ledger_sending", "tidegate.load"))
        self._entry = client.register_script(lua_script("ledger_entry", "tidegate.load"))
        # The server this ledger last read (and one it saw replaced), starting from
        # what this process's parent read before it forked this child, if it did.
        seen = _WITNESSED.get(_address(client))
        self._witness = _Witness(seen.run_id, seen.replaced) if seen else _Witness()

    def _now_arg(self) -> str:
        return script_now_ms(self._clock)

    def _key(self, downstream: str, key: str) -> str:
        return self._keys.delivered(downstream, key)

    def _epoch_key(self, downstream: str) -> str:
        return self._keys.ledger_epoch(downstream)

    def state(self, downstream: str, key: str) -> DeliveryState:
        """Where ``key`` stands with ``downstream``."""
        with map_redis_errors("ledger check"):
            value = self.client.get(self._key(downstream, key))
        return parse_entry(value)[0]

    def entry(self, downstream: str, key: str) -> LedgerEntry:
        """``key``'s record with ``downstream``, the fleet clock and the doubt, in one call."""
        keys = [self._key(downstream, key), self._epoch_key(downstream)]
        with map_redis_errors("ledger check"):
            known = self._witness.known(self.doubt_s)
            args: list[str | float] = [self.doubt_s * 1000, self._now_arg(), known]
            value, now, doubt_until, raw_run_id = self._entry(keys=keys, args=args)
        self._witness.read(text(raw_run_id))
        state, sent_at = parse_entry(value or None)
        now_ms = float(now)
        return LedgerEntry(state, sent_at, now_ms, now_ms < float(doubt_until))

    def delivered(self, downstream: str, key: str) -> bool:
        """Whether ``downstream`` already accepted ``key``."""
        return self.state(downstream, key) is DeliveryState.DELIVERED

    def sending(self, downstream: str, key: str, *, now_ms: str = "") -> float | None:
        """Record that ``key`` is about to be sent, and when (never downgrades ``delivered``).

        Args:
            downstream: the downstream's name.
            key: the unit's idempotency key.
            now_ms: the send time in ms since epoch; ``""`` (the default) takes the
                store's clock (Redis ``TIME`` when none was given).

        Returns:
            The recorded send time (ms since epoch), or ``None`` when the entry already
            says delivered.
        """
        at = now_ms or self._now_arg()
        with map_redis_errors("ledger mark sending"):
            sent = self._sending(keys=[self._key(downstream, key)], args=[at, self.ttl_s])
        return None if sent is None else float(sent)

    def refused(self, downstream: str, key: str) -> None:
        """Record that the last attempt was refused outright (a 503, a connection never
        made): no request of ``key`` can still be running downstream, so a later
        attempt need not wait for one. The entry stays ``sending`` (an attempt before
        it may have landed), with its send time set to 0; ``delivered`` is left alone.
        """
        with map_redis_errors("ledger mark refused"):
            self._sending(keys=[self._key(downstream, key)], args=["0", self.ttl_s])

    def mark(self, downstream: str, key: str) -> None:
        """Record that ``downstream`` accepted ``key``."""
        with map_redis_errors("ledger mark"):
            self.client.set(self._key(downstream, key), _DELIVERED, ex=self.ttl_s)
