"""Durable parking for messages that must wait long: a Redis sorted set by due time.

A worker that would have to wait minutes for the gate (the downstream paused us, or
its backlog of reservations is long) must not hold the message, and must not use a
Celery ``countdown``/``eta`` either: ETA tasks sit in worker memory until due (Celery
#9849), which rebuilds exactly the memory balloon prefetch 1 avoided. Instead the
message is *parked* here — durable, in Redis, invisible to the workers — and a mover
republishes it when due. Claiming is crash-safe (``lease_claim.lua``, the quarantine's
claim too): a mover that dies between claim and republish loses nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from tidegate._redis import clock_ms, hash_pages, lua_script, map_redis_errors, script_now_ms
from tidegate.events import MessageParked, emit
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = ["ParkedMessage", "ParkingLot", "envelope_keys"]


#: How long a mover has to republish a claimed message before another may take it, ms.
CLAIM_LEASE_MS = 30_000


@dataclass(frozen=True, slots=True)
class ParkedMessage:
    """One parked message: ``envelope`` is whatever the integration needs to republish."""

    id: str
    envelope: dict[str, Any]


def envelope_keys(bodies: Iterable[bytes | str]) -> list[str]:
    """The idempotency keys of parked envelopes (JSON bodies); a body without one, or
    not JSON, names no unit and is skipped."""
    keys = []
    for raw in bodies:
        try:
            key = json.loads(raw).get("key")
        except (ValueError, AttributeError):
            continue
        if key is not None:
            keys.append(str(key))
    return keys


class ParkingLot:
    """The parked messages of one namespace.

    Args:
        client: a sync Redis client.
        prefix: key prefix (keys: :meth:`tidegate.keys.Keyspace.parking`).
        clock: ms since the epoch for due times and leases; ``None`` = Redis ``TIME``,
            the fleet clock (tests pass a
            :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self._clock = clock
        keys = Keyspace(prefix).parking()
        self._due, self._envelopes, self._inflight = keys.due, keys.env, keys.inflight
        self._park = client.register_script(lua_script("park", "tidegate.load"))
        self._claim = client.register_script(lua_script("lease_claim", "tidegate.load"))

    def _now_arg(self) -> str:
        return script_now_ms(self._clock)

    def park(self, envelope: Mapping[str, Any], *, delay_s: float, reason: str) -> str:
        """Store ``envelope`` until ``delay_s`` from now (fleet clock); return its id."""
        message_id = uuid.uuid4().hex
        body = json.dumps(dict(envelope), separators=(",", ":"))
        with map_redis_errors("park"):
            self._park(
                [self._due, self._envelopes],
                [self._now_arg(), repr(max(0.0, delay_s) * 1000.0), message_id, body],
            )
        emit(MessageParked(message_id, envelope.get("task"), round(delay_s, 3), reason))
        return message_id

    def claim_due(self, limit: int = 100) -> list[ParkedMessage]:
        """Claim up to ``limit`` due messages; :meth:`ack` each after republishing it."""
        with map_redis_errors("claim parked"):
            _held, *flat = self._claim(
                [self._due, self._inflight, self._envelopes],
                [self._now_arg(), limit, CLAIM_LEASE_MS, "due"],
            )
        return [
            ParkedMessage(flat[i].decode(), json.loads(flat[i + 1])) for i in range(0, len(flat), 3)
        ]

    def ack(self, message_id: str) -> None:
        """Forget a republished message."""
        with map_redis_errors("ack parked"):
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(self._inflight, message_id)
            pipe.hdel(self._envelopes, message_id)
            pipe.execute()

    def iter_keys(self, page: int) -> Iterator[list[str]]:
        """The idempotency keys of the parked messages, ``page`` envelopes at a time."""
        for raws in hash_pages(self.client, self._envelopes, page, "parked keys"):
            if keys := envelope_keys(raws.values()):
                yield keys

    def depth(self) -> int:
        """Messages parked or being moved (not yet republished)."""
        with map_redis_errors("parking depth"):
            return int(self.client.hlen(self._envelopes))

    def next_due_in_s(self) -> float | None:
        """Seconds until the earliest parked message is due (fleet clock), or None."""
        with map_redis_errors("parking next due"):
            first = cast(
                "list[tuple[bytes, float]]", self.client.zrange(self._due, 0, 0, withscores=True)
            )
            if not first:
                return None
        now_ms = clock_ms(self.client, self._clock, "parking clock")
        return max(0.0, (first[0][1] - now_ms) / 1000.0)
