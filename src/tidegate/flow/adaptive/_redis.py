"""The fleet-wide adaptive store: the lease and the fenced write are Lua scripts.

``adaptive_lease.lua`` elects the controller; ``adaptive_save.lua`` checks the lease and
writes the state and the history in the same atomic step. Reads are plain ``HGETALL``
and ``LRANGE``. The clock is Redis ``TIME`` unless a test passes a manual clock, whose
time then goes to the scripts as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis

from tidegate._redis import MIN_BLOCK_S, blocking_timeout_s, lua_script, map_redis_errors, text
from tidegate.flow.adaptive._hint import RateLimitHint
from tidegate.flow.adaptive._observe import (
    CallOutcome,
    Observations,
    check_report,
    encode_hint,
    observations_from_fields,
)
from tidegate.flow.adaptive._store import (
    DEFAULT_HISTORY_MAX,
    OBS_TTL_MS,
    WAIT_SLICE_S,
    AdaptiveKeys,
    AdaptiveRecord,
    check_history_max,
    check_ttl_ms,
    check_wait_s,
    decode_event,
    decode_record,
    encode_event,
    encode_record,
)
from tidegate.flow.backends.memory import ManualClock

__all__ = ["RedisAdaptiveStore"]

_PACKAGE = "tidegate.flow.adaptive"


class RedisAdaptiveStore:
    """The adaptive controller's state in Redis, shared by the fleet.

    Args:
        client: a ``redis.Redis`` (``tidegate._redis.client_from_url`` gives
            tidegate's timeouts).
        clock: a manual clock for tests; Redis ``TIME`` when omitted.
    """

    def __init__(self, client: redis.Redis, *, clock: ManualClock | None = None) -> None:
        self.client = client
        self.clock = clock
        self._lease = client.register_script(lua_script("adaptive_lease", _PACKAGE))
        self._save = client.register_script(lua_script("adaptive_save", _PACKAGE))
        self._observe = client.register_script(lua_script("adaptive_observe", _PACKAGE))
        self._drain = client.register_script(lua_script("adaptive_drain", _PACKAGE))

    def _now_arg(self) -> str:
        return "" if self.clock is None else repr(self.clock.now_ms())

    def now_ms(self) -> float:
        if self.clock is not None:
            return self.clock.now_ms()
        with map_redis_errors("adaptive clock"):
            seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) / 1000

    def elect(self, keys: AdaptiveKeys, holder: str, ttl_ms: float) -> bool:
        check_ttl_ms(ttl_ms)
        with map_redis_errors("adaptive lease"):
            held = self._lease([keys.lease], [holder, repr(float(ttl_ms)), self._now_arg()])
        return bool(held)

    def resign(self, keys: AdaptiveKeys, holder: str) -> None:
        with map_redis_errors("adaptive lease release"):
            self._lease([keys.lease], [holder, "0", self._now_arg()])

    def leader(self, keys: AdaptiveKeys) -> str | None:
        with map_redis_errors("adaptive lease read"):
            holder, until = self.client.hmget(keys.lease, ["holder", "until_ms"])
        if holder is None or until is None or float(until) < self.now_ms():
            return None
        return text(holder)

    def load(self, keys: AdaptiveKeys) -> AdaptiveRecord:
        with map_redis_errors("adaptive load"):
            raw = self.client.hgetall(keys.state)
        return decode_record({text(k): text(v) for k, v in raw.items()})

    def save(
        self,
        keys: AdaptiveKeys,
        holder: str,
        record: AdaptiveRecord,
        events: Sequence[Mapping[str, Any]] = (),
        *,
        history_max: int = DEFAULT_HISTORY_MAX,
    ) -> bool:
        check_history_max(history_max)
        fields = encode_record(record)
        args: list[str | int] = [holder, self._now_arg(), history_max, len(fields)]
        for field, value in fields.items():
            args += [field, value]
        args += [encode_event(event) for event in events]
        with map_redis_errors("adaptive save"):
            written = self._save([keys.lease, keys.state, keys.history], args)
        return bool(written)

    def history(self, keys: AdaptiveKeys, limit: int = DEFAULT_HISTORY_MAX) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        with map_redis_errors("adaptive history"):
            raw = self.client.lrange(keys.history, 0, limit - 1)
        return [decode_event(entry) for entry in raw]

    def read_overrides(self, keys: AdaptiveKeys) -> dict[str, str]:
        with map_redis_errors("adaptive overrides read"):
            raw = self.client.hgetall(keys.policy)
        return {text(k): text(v) for k, v in raw.items()}

    def write_overrides(
        self, keys: AdaptiveKeys, values: Mapping[str, str], *, clear: Sequence[str] = ()
    ) -> None:
        with map_redis_errors("adaptive overrides write"):
            pipe = self.client.pipeline(transaction=True)
            if clear:
                pipe.hdel(keys.policy, *clear)
            if values:
                pipe.hset(keys.policy, mapping={k: str(v) for k, v in values.items()})
            pipe.execute()

    def observe(
        self,
        keys: AdaptiveKeys,
        outcome: CallOutcome,
        *,
        latency_ms: float | None = None,
        in_flight: int = 0,
        held: bool = False,
        hint: RateLimitHint | None = None,
        admitted_ms: float | None = None,
    ) -> None:
        check_report(outcome, latency_ms, in_flight, admitted_ms)
        args: list[str | int] = [
            outcome,
            "" if latency_ms is None else repr(float(latency_ms)),
            in_flight,
            "1" if held else "0",
            encode_hint(hint),
            OBS_TTL_MS,
            "" if admitted_ms is None else repr(float(admitted_ms)),
        ]
        with map_redis_errors("adaptive observe"):
            self._observe([keys.obs, keys.wake], args)

    def drain(self, keys: AdaptiveKeys) -> Observations:
        with map_redis_errors("adaptive drain"):
            flat = self._drain([keys.obs, keys.wake])
        fields = {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        return observations_from_fields(fields)

    def wait_rejection(self, keys: AdaptiveKeys, timeout_s: float) -> bool:
        check_wait_s(timeout_s)
        if timeout_s < MIN_BLOCK_S:
            # Just look: a BLPOP this short blocks forever on Redis 6.2 (see
            # MIN_BLOCK_S), and the loop asks for the last sliver of its tick's wait
            # often (the controller's ticks came 6 s apart, not 1 s, while it did).
            with map_redis_errors("adaptive wake"):
                return self.client.lpop(keys.wake) is not None
        # BLPOP takes the token; the next drain would have taken it anyway, and the
        # window it stands for is still there. Bounded by WAIT_SLICE_S so the client's
        # socket timeout never cuts a wait short.
        wait_s = blocking_timeout_s(self.client, min(timeout_s, WAIT_SLICE_S))
        with map_redis_errors("adaptive wake"):
            popped = self.client.blpop([keys.wake], timeout=wait_s)
        return popped is not None
