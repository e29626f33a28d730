"""The delivery ledger: which idempotency keys a downstream has already accepted.

Every write carries an idempotency key, and a well-behaved downstream ignores a
repeat. But not every downstream is well-behaved, and a replay or a redelivery after
a crash should not even ask. The ledger records each accepted key per downstream
(one Redis key with a TTL, so it never grows without bound) and a gated task checks
it before calling. The window between "accepted" and "recorded" remains — a crash
exactly there resends once, and the idempotency key covers that.
"""

from __future__ import annotations

import redis

from tidegate._redis import map_redis_errors
from tidegate.flow.backends.base import DEFAULT_PREFIX

__all__ = ["DEFAULT_LEDGER_TTL_S", "DeliveryLedger"]

#: How long an accepted key is remembered: longer than any replay or redelivery.
DEFAULT_LEDGER_TTL_S = 7 * 24 * 3600


class DeliveryLedger:
    """Accepted idempotency keys per downstream.

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

    def delivered(self, downstream: str, key: str) -> bool:
        """Whether ``downstream`` already accepted ``key``."""
        with map_redis_errors("ledger check"):
            return bool(self.client.exists(self._key(downstream, key)))

    def mark(self, downstream: str, key: str) -> None:
        """Record that ``downstream`` accepted ``key``."""
        with map_redis_errors("ledger mark"):
            self.client.set(self._key(downstream, key), 1, ex=self.ttl_s)
