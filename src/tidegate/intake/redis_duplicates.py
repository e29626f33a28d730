"""The duplicate window in Redis: one string key per interchange, three Lua scripts.

The scripts (``lua/duplicate_*.lua``) hold the whole contract; this class only builds
the key, passes the clock's reading and translates redis-py errors at one boundary.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from tidegate._redis import lua_script, map_redis_errors, text
from tidegate.intake.decision import Claim
from tidegate.intake.duplicates import (
    DEFAULT_LEASE_MS,
    DEFAULT_WINDOW_MS,
    ClaimResult,
    check_durations,
)
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = ["RedisDuplicates"]

_PACKAGE = "tidegate.intake"


class RedisDuplicates:
    """:class:`~tidegate.intake.duplicates.DuplicateStore` on Redis.

    Args:
        client: tidegate's Redis.
        prefix: key prefix (the fleet's ``TIDEGATE_PREFIX``).
        window_ms: how long an accepted interchange is remembered (default 30 days).
        lease_ms: how long an unfinished claim blocks other copies.
        wall_ms: ms since epoch, stored with each accepted record (injectable).

    Raises:
        ConfigurationError: a window or lease that is not a whole number of ms >= 1.
        BackendUnavailable: (from each call) Redis is unreachable.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        window_ms: int = DEFAULT_WINDOW_MS,
        lease_ms: int = DEFAULT_LEASE_MS,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        check_durations(window_ms, lease_ms)
        self.client = client
        self.prefix = prefix
        self._keys = Keyspace(prefix)
        self.window_ms = window_ms
        self.lease_ms = lease_ms
        self._wall_ms = wall_ms
        self._claim = client.register_script(lua_script("duplicate_claim", _PACKAGE))
        self._confirm = client.register_script(lua_script("duplicate_confirm", _PACKAGE))
        self._release = client.register_script(lua_script("duplicate_release", _PACKAGE))

    def claim(self, sender: str, control_reference: str, token: str) -> ClaimResult:
        key = self._keys.interchange(sender, control_reference)
        with map_redis_errors("intake duplicate claim"):
            verdict, detail = self._claim(keys=[key], args=[token, self.lease_ms])
        verdict, detail = text(verdict), text(detail)
        if verdict == "claimed":
            return ClaimResult(Claim.NEW)
        if verdict == "duplicate":
            return ClaimResult(Claim.DUPLICATE, accepted_at_ms=int(detail))
        return ClaimResult(Claim.IN_FLIGHT, lease_left_ms=int(detail))

    def confirm(self, sender: str, control_reference: str, token: str) -> bool:
        key = self._keys.interchange(sender, control_reference)
        with map_redis_errors("intake duplicate confirm"):
            held = self._confirm(keys=[key], args=[token, self._wall_ms(), self.window_ms])
        return bool(int(held))

    def release(self, sender: str, control_reference: str, token: str) -> bool:
        key = self._keys.interchange(sender, control_reference)
        with map_redis_errors("intake duplicate release"):
            released = self._release(keys=[key], args=[token])
        return bool(int(released))
