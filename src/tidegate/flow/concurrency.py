"""A fleet-wide cap on calls in flight: a semaphore of leases in a Redis sorted set.

Each holder has a lease scored by its expiry. Release removes it and wakes one waiter
(``BLPOP`` on a wake-up list, so waiters block instead of polling). A holder killed
with SIGKILL never releases; its lease simply expires and the next admission reclaims
the slot (``gate_lease_reclaimed``). Long calls keep their slot by renewing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from tidegate.errors import ConfigurationError
from tidegate.flow._control import AsyncControl, SyncControl
from tidegate.flow._core import DEFAULT_MAX_WAIT_S, Limit
from tidegate.flow.permit import AsyncPermit, Permit
from tidegate.keys import DEFAULT_PREFIX
from tidegate.settings import GatePolicy

__all__ = ["AsyncConcurrencyLimiter", "ConcurrencyLimiter"]


def _concurrency_limit(name: str, limit: int, lease_s: float, prefix: str) -> Limit:
    policy = GatePolicy(concurrency=limit, lease_s=lease_s)
    if policy.concurrency < 1:
        raise ConfigurationError(f"limit must be an integer >= 1, got {limit!r}")
    return Limit.build(
        name, kind="sem", prefix=prefix, concurrency=policy.concurrency, lease_s=policy.lease_s
    )


class ConcurrencyLimiter(SyncControl):
    """At most ``limit`` holders at once, fleet-wide.

    Args:
        store: a ``redis.Redis``, a URL, or a backend.
        name: the semaphore's name.
        limit: holders allowed at once (>= 1).
        lease_s: seconds a lease lives without renewal; a crashed holder's slot comes
            back after at most this long.

    Example::

        tos = ConcurrencyLimiter(client, "tos", limit=4, lease_s=30)
        with tos.slot(max_wait=60):
            push_container_report(...)
    """

    def __init__(
        self,
        store: Any,
        name: str,
        *,
        limit: int,
        lease_s: float = 30.0,
        prefix: str = DEFAULT_PREFIX,
        fail_open: bool = False,
    ) -> None:
        limit_ = _concurrency_limit(name, limit, lease_s, prefix)
        super().__init__(store, limit_, fail_open=fail_open)

    def acquire(self, *, max_wait: float = DEFAULT_MAX_WAIT_S) -> Permit:
        """Wait up to ``max_wait`` for a slot; the caller must ``release()`` the permit."""
        return self._admit(1, max_wait)

    def try_acquire(self) -> Permit | None:
        """A permit if a slot is free now, else ``None``."""
        decision = self._try(1)
        return decision.permit if isinstance(decision.permit, Permit) else None

    @contextlib.contextmanager
    def slot(
        self, *, max_wait: float = DEFAULT_MAX_WAIT_S, auto_renew: bool = True
    ) -> Iterator[Permit]:
        """Hold a slot for the block (renewed while it runs), released in ``finally``."""
        with self._slot(1, max_wait, auto_renew) as permit:
            yield permit


class AsyncConcurrencyLimiter(AsyncControl):
    """The asyncio twin of :class:`ConcurrencyLimiter`."""

    def __init__(
        self,
        store: Any,
        name: str,
        *,
        limit: int,
        lease_s: float = 30.0,
        prefix: str = DEFAULT_PREFIX,
        fail_open: bool = False,
    ) -> None:
        limit_ = _concurrency_limit(name, limit, lease_s, prefix)
        super().__init__(store, limit_, fail_open=fail_open)

    async def acquire(self, *, max_wait: float = DEFAULT_MAX_WAIT_S) -> AsyncPermit:
        """Wait up to ``max_wait`` for a slot; the caller must ``await release()``."""
        return await self._admit(1, max_wait)

    @contextlib.asynccontextmanager
    async def slot(
        self, *, max_wait: float = DEFAULT_MAX_WAIT_S, auto_renew: bool = True
    ) -> AsyncIterator[AsyncPermit]:
        """Hold a slot for the block (renewed while it runs), released in ``finally``."""
        async with self._slot(1, max_wait, auto_renew) as permit:
            yield permit
