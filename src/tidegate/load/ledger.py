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
"""

from __future__ import annotations

import enum

import redis

from tidegate._redis import map_redis_errors
from tidegate.flow.backends.base import DEFAULT_PREFIX

__all__ = ["DEFAULT_LEDGER_TTL_S", "DeliveryLedger", "DeliveryState"]

#: How long a key is remembered: longer than any replay or redelivery.
DEFAULT_LEDGER_TTL_S = 7 * 24 * 3600

_DELIVERED = b"1"
_SENDING = b"s"


class DeliveryState(enum.Enum):
    """Where one unit stands with one downstream."""

    #: Never sent (or forgotten after the TTL).
    NEW = "new"
    #: Sent at least once without a recorded answer: it may have been accepted.
    SENDING = "sending"
    #: Accepted by the downstream.
    DELIVERED = "delivered"


class DeliveryLedger:
    """Per-downstream delivery state of each idempotency key.

    Args:
        client: a sync Redis client.
        prefix: key prefix.
        ttl_s: how long a key is remembered.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl_s: int = DEFAULT_LEDGER_TTL_S,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.ttl_s = ttl_s

    def _key(self, downstream: str, key: str) -> str:
        return f"{self.prefix}:delivered:{{{downstream}}}:{key}"

    def state(self, downstream: str, key: str) -> DeliveryState:
        """Where ``key`` stands with ``downstream``."""
        with map_redis_errors("ledger check"):
            value = self.client.get(self._key(downstream, key))
        if value is None:
            return DeliveryState.NEW
        return DeliveryState.DELIVERED if value == _DELIVERED else DeliveryState.SENDING

    def delivered(self, downstream: str, key: str) -> bool:
        """Whether ``downstream`` already accepted ``key``."""
        return self.state(downstream, key) is DeliveryState.DELIVERED

    def sending(self, downstream: str, key: str) -> None:
        """Record that ``key`` is about to be sent (never downgrades ``delivered``)."""
        with map_redis_errors("ledger mark sending"):
            self.client.set(self._key(downstream, key), _SENDING, ex=self.ttl_s, nx=True)

    def mark(self, downstream: str, key: str) -> None:
        """Record that ``downstream`` accepted ``key``."""
        with map_redis_errors("ledger mark"):
            self.client.set(self._key(downstream, key), _DELIVERED, ex=self.ttl_s)
