"""Where a manifest's B/L units wait while the fan-out runs, and the aggregate's claim.

The dispatch step stores every unit of a batch in one Redis hash and sends only
``(batch_id, unit key)`` through the broker: a 5,000-consignment manifest becomes 5,000
small messages instead of 5,000 copies of raw EDIFACT, and the dispatch worker's
memory stays flat. The aggregate claims its batch with ``SET NX`` (with expiry): run
twice — a redelivery, a chord retry — it forwards once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from tidegate._redis import map_redis_errors
from tidegate.flow.backends.base import DEFAULT_PREFIX

__all__ = ["DEFAULT_BATCH_TTL_S", "BatchStore"]

#: How long a batch's units and summary are kept, in seconds.
DEFAULT_BATCH_TTL_S = 7 * 24 * 3600
_PIPELINE_CHUNK = 500


class BatchStore:
    """Units, claims and summaries of manifest batches.

    Args:
        client: a sync Redis client.
        prefix: key prefix; one ``{batch id}`` hash tag per batch.
        ttl_s: expiry of everything a batch stores.
    """

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX, ttl_s: int = DEFAULT_BATCH_TTL_S
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.ttl_s = ttl_s

    def _key(self, batch_id: str, part: str) -> str:
        return f"{self.prefix}:batch:{{{batch_id}}}:{part}"

    def save_units(self, batch_id: str, units: Iterable[Mapping[str, Any]]) -> int:
        """Store units (each with a ``"key"``) in chunks; returns how many were stored."""
        key = self._key(batch_id, "units")
        count = 0
        chunk: dict[Any, Any] = {}
        with map_redis_errors("save batch units"):
            for unit in units:
                chunk[str(unit["key"])] = json.dumps(unit, separators=(",", ":"))
                count += 1
                if len(chunk) >= _PIPELINE_CHUNK:
                    self.client.hset(key, mapping=chunk)
                    chunk = {}
            if chunk:
                self.client.hset(key, mapping=chunk)
            self.client.expire(key, self.ttl_s)
        return count

    def discard_units(self, batch_id: str) -> None:
        """Delete every unit stored for the batch (a manifest that could not be read).

        Units are stored while the manifest is still being read, so a document that
        turns out unreadable halfway has already left some: they must not outlive it.
        """
        with map_redis_errors("discard batch units"):
            self.client.delete(self._key(batch_id, "units"))

    def unit(self, batch_id: str, key: str) -> dict[str, Any] | None:
        """One stored unit, or ``None`` (expired, or never stored)."""
        with map_redis_errors("load batch unit"):
            raw = self.client.hget(self._key(batch_id, "units"), key)
        return json.loads(raw) if raw else None

    def mark_dispatched(self, batch_id: str) -> None:
        """Record that the batch's chord was sent (a redelivered dispatch skips it)."""
        with map_redis_errors("mark dispatched"):
            self.client.set(self._key(batch_id, "dispatched"), 1, ex=self.ttl_s)

    def dispatched(self, batch_id: str) -> bool:
        with map_redis_errors("check dispatched"):
            return bool(self.client.exists(self._key(batch_id, "dispatched")))

    def claim_aggregate(self, batch_id: str) -> bool:
        """True for the first caller only: the aggregate of a batch runs once."""
        with map_redis_errors("claim aggregate"):
            return bool(
                self.client.set(self._key(batch_id, "aggregated"), 1, nx=True, ex=self.ttl_s)
            )

    def save_summary(self, batch_id: str, summary: Mapping[str, Any]) -> None:
        with map_redis_errors("save batch summary"):
            self.client.set(self._key(batch_id, "summary"), json.dumps(summary), ex=self.ttl_s)

    def summary(self, batch_id: str) -> dict[str, Any] | None:
        with map_redis_errors("load batch summary"):
            raw = self.client.get(self._key(batch_id, "summary"))
        return json.loads(raw) if raw else None
