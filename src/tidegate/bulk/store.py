"""Where a manifest's B/L units wait while the fan-out runs, and how the fan-out counts.

The dispatch step stores every unit of a batch in one Redis hash (and its order in a
sorted set) and sends only ``(batch_id, unit key)`` through the broker: a
5,000-consignment manifest becomes 5,000 small messages instead of 5,000 copies of raw
EDIFACT. Each parse task records its outcome here, once (``bulk_outcome.lua``), and the
last outcome — or the dispatch's seal, whichever comes later (``bulk_seal.lua``) —
starts the aggregate, which reads the outcomes back in pages. No process ever holds a
batch's keys or results at once: a Celery chord would carry every result through one
message and one process. The aggregate claims its batch with ``SET NX`` (with expiry):
run twice — a redelivery — it forwards once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import redis

from tidegate._redis import lua_script, map_redis_errors
from tidegate.keys import DEFAULT_PREFIX, BatchKeys, Keyspace

__all__ = ["DEFAULT_BATCH_TTL_S", "DOCUMENT_CHUNK", "BatchStore", "UnitWriter"]

#: How long a batch's units and summary are kept, in seconds.
DEFAULT_BATCH_TTL_S = 7 * 24 * 3600
_PIPELINE_CHUNK = 500
#: Bytes per stored chunk of a manifest document.
DOCUMENT_CHUNK = 256 * 1024


class UnitWriter:
    """Units pushed one at a time, written 500 at a time: the batch's hash of units and
    the sorted set of their first positions. Whoever carves the units never holds more
    than one chunk of them."""

    def __init__(self, store: BatchStore, batch_id: str) -> None:
        self._store = store
        keys = store.keys(batch_id)
        self._units, self._order = keys.units, keys.order
        self._chunk: dict[Any, Any] = {}
        self._positions: dict[Any, Any] = {}
        self.count = 0

    def add(self, unit: Mapping[str, Any]) -> None:
        """Buffer one unit; a full chunk is written at once."""
        key = str(unit["key"])
        self._chunk[key] = json.dumps(unit, separators=(",", ":"))
        self._positions.setdefault(key, self.count)
        self.count += 1
        if len(self._chunk) >= _PIPELINE_CHUNK:
            self._flush()

    def close(self) -> int:
        """Write what is buffered; returns how many units were added."""
        if self._chunk:
            self._flush()
        return self.count

    def _flush(self) -> None:
        ttl = self._store.ttl_s
        with map_redis_errors("save batch units"):
            pipe = self._store.client.pipeline(transaction=False)
            pipe.hset(self._units, mapping=self._chunk)
            pipe.zadd(self._order, self._positions, nx=True)
            pipe.expire(self._units, ttl)
            pipe.expire(self._order, ttl)
            pipe.execute()
        self._chunk, self._positions = {}, {}


class BatchStore:
    """Units, claims and summaries of manifest batches.

    Args:
        client: a sync Redis client.
        prefix: key prefix (keys: :meth:`tidegate.keys.Keyspace.batch`).
        ttl_s: expiry of everything a batch stores.
    """

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX, ttl_s: int = DEFAULT_BATCH_TTL_S
    ) -> None:
        self.client = client
        self.prefix = prefix
        self._keyspace = Keyspace(prefix)
        self.ttl_s = ttl_s
        self._seal = client.register_script(lua_script("bulk_seal", "tidegate.bulk"))
        self._outcome = client.register_script(lua_script("bulk_outcome", "tidegate.bulk"))

    def keys(self, batch_id: str) -> BatchKeys:
        """Every key of batch ``batch_id``."""
        return self._keyspace.batch(batch_id)

    def save_units(self, batch_id: str, units: Iterable[Mapping[str, Any]]) -> int:
        """Store units (each with a ``"key"``) in chunks, and their order; returns how many
        were read (a key seen twice is stored once)."""
        writer = self.unit_writer(batch_id)
        for unit in units:
            writer.add(unit)
        return writer.close()

    def unit_writer(self, batch_id: str) -> UnitWriter:
        """A writer to push units to as they are carved (see :class:`UnitWriter`)."""
        return UnitWriter(self, batch_id)

    def unit_keys(self, batch_id: str, page: int = _PIPELINE_CHUNK) -> Iterator[list[str]]:
        """The batch's distinct unit keys in manifest order, ``page`` at a time."""
        order = self.keys(batch_id).order
        start = 0
        while True:
            with map_redis_errors("read batch order"):
                keys = cast("list[bytes]", self.client.zrange(order, start, start + page - 1))
            if keys:
                yield [k.decode() for k in keys]
            if len(keys) < page:
                return
            start += page

    def distinct_units(self, batch_id: str) -> int:
        with map_redis_errors("count batch units"):
            return int(self.client.zcard(self.keys(batch_id).order))

    def seal(self, batch_id: str, expected: int) -> bool:
        """Every parse task is published: True if the caller must start the aggregate."""
        k = self.keys(batch_id)
        keys = [k.expected, k.done, k.fired]
        with map_redis_errors("seal batch"):
            return bool(self._seal(keys, [expected, self.ttl_s]))

    def record_outcome(self, batch_id: str, key: str, outcome: Mapping[str, Any]) -> bool:
        """Record a unit's outcome once: True if it was the last and the caller must start
        the aggregate."""
        k = self.keys(batch_id)
        keys = [k.outcomes, k.done, k.expected, k.fired]
        body = json.dumps(dict(outcome), separators=(",", ":"))
        with map_redis_errors("record unit outcome"):
            return bool(self._outcome(keys, [key, body, self.ttl_s]))

    def outcomes(self, batch_id: str, keys: list[str]) -> list[dict[str, Any] | None]:
        """The recorded outcomes of ``keys`` (None where none is recorded)."""
        with map_redis_errors("read unit outcomes"):
            raws = cast("list[bytes | None]", self.client.hmget(self.keys(batch_id).outcomes, keys))
        return [json.loads(raw) if raw else None for raw in raws]

    def not_forwarded(self, batch_id: str, bl_numbers: list[str]) -> list[bool]:
        """For each B/L number, whether it still has to be forwarded: not marked yet, and
        its first place in ``bl_numbers`` (the same B/L twice in one manifest reaches the
        downstream once)."""
        if not bl_numbers:
            return []
        with map_redis_errors("read forwarded"):
            marked = self.client.smismember(self.keys(batch_id).forwarded, bl_numbers)
        seen: set[str] = set()
        result = []
        for number, done in zip(bl_numbers, marked, strict=True):
            result.append(not done and number not in seen)
            seen.add(number)
        return result

    def mark_forwarded(self, batch_id: str, bl_numbers: list[str]) -> None:
        """Record that these B/Ls' forwards reached the broker. Called after the page's
        flush, never before: a worker killed between the two leaves them unmarked, and
        the aggregate's next run publishes them again (the forward's idempotency key
        keeps the downstream from taking one twice), where marking first lost them."""
        if not bl_numbers:
            return
        name = self.keys(batch_id).forwarded
        with map_redis_errors("mark forwarded"):
            pipe = self.client.pipeline(transaction=False)
            pipe.sadd(name, *bl_numbers)
            pipe.expire(name, self.ttl_s)
            pipe.execute()

    def forwarded(self, batch_id: str) -> int:
        """How many distinct B/Ls of the batch have been forwarded."""
        with map_redis_errors("count forwarded"):
            return int(self.client.scard(self.keys(batch_id).forwarded))

    def save_document(self, batch_id: str, data: bytes, *, chunk: int = DOCUMENT_CHUNK) -> int:
        """Store a manifest's bytes in chunks (a claim check): the dispatch message then
        carries only the batch id, and the dispatch streams the document back instead
        of one worker process decoding a message of tens of megabytes. Returns the
        number of chunks."""
        name = self.keys(batch_id).document
        with map_redis_errors("save batch document"):
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(name)
            for start in range(0, len(data), chunk):
                pipe.rpush(name, data[start : start + chunk])
            pipe.expire(name, self.ttl_s)
            pipe.execute()
        return -(-len(data) // chunk)

    def document_chunks(self, batch_id: str) -> Iterator[bytes]:
        """The stored document, one chunk at a time (empty if none is stored)."""
        name = self.keys(batch_id).document
        index = 0
        while True:
            with map_redis_errors("read batch document"):
                part = cast("bytes | None", self.client.lindex(name, index))
            if part is None:
                return
            yield part
            index += 1

    def discard_units(self, batch_id: str) -> None:
        """Delete every unit stored for the batch (a manifest that could not be read).

        Units are stored while the manifest is still being read, so a document that
        turns out unreadable halfway has already left some: they must not outlive it.
        A stored document stays (until the batch's expiry): a replay reads it again.
        """
        k = self.keys(batch_id)
        with map_redis_errors("discard batch units"):
            self.client.delete(k.units, k.order)

    def unit(self, batch_id: str, key: str) -> dict[str, Any] | None:
        """One stored unit, or ``None`` (expired, or never stored)."""
        with map_redis_errors("load batch unit"):
            raw = self.client.hget(self.keys(batch_id).units, key)
        return json.loads(raw) if raw else None

    def mark_dispatched(self, batch_id: str) -> None:
        """Record that the batch's chord was sent (a redelivered dispatch skips it)."""
        with map_redis_errors("mark dispatched"):
            self.client.set(self.keys(batch_id).dispatched, 1, ex=self.ttl_s)

    def dispatched(self, batch_id: str) -> bool:
        with map_redis_errors("check dispatched"):
            return bool(self.client.exists(self.keys(batch_id).dispatched))

    def save_summary(self, batch_id: str, summary: Mapping[str, Any]) -> None:
        with map_redis_errors("save batch summary"):
            self.client.set(self.keys(batch_id).summary, json.dumps(summary), ex=self.ttl_s)

    def summary(self, batch_id: str) -> dict[str, Any] | None:
        with map_redis_errors("load batch summary"):
            raw = self.client.get(self.keys(batch_id).summary)
        return json.loads(raw) if raw else None
