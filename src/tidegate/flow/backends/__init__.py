"""Where gate state lives: Redis for a fleet, memory for one process.

The Redis backends are imported lazily so that ``tidegate.flow`` stays importable for
code that only ever uses the memory backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidegate.flow.backends.base import (
    DEFAULT_PREFIX,
    AcquireParams,
    AcquireResult,
    AsyncBackend,
    Backend,
    GateKeys,
    GateSnapshot,
    Status,
)
from tidegate.flow.backends.memory import AsyncMemoryBackend, ManualClock, MemoryBackend

if TYPE_CHECKING:
    from tidegate.flow.backends.redis import AsyncRedisBackend, RedisBackend

__all__ = [
    "DEFAULT_PREFIX",
    "AcquireParams",
    "AcquireResult",
    "AsyncBackend",
    "AsyncMemoryBackend",
    "AsyncRedisBackend",
    "Backend",
    "GateKeys",
    "GateSnapshot",
    "ManualClock",
    "MemoryBackend",
    "RedisBackend",
    "Status",
]


def __getattr__(name: str) -> Any:
    if name in {"RedisBackend", "AsyncRedisBackend"}:
        from tidegate.flow.backends import redis as _redis_backend

        return getattr(_redis_backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
