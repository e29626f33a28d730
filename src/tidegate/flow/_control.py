"""The I/O halves of every control: one sync base, one asyncio base.

Both run the same :class:`~tidegate.flow._core.Limit` logic; they differ in how they
call the backend and in the permit type they hand out. The fail-open policy (admit
when Redis is unreachable, only if explicitly asked) is applied here, in one place.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import redis
import redis.asyncio

from tidegate._redis import async_client_from_url, client_from_url
from tidegate.errors import BackendError, BackendUnavailable, ConfigurationError
from tidegate.flow._admitted import holding
from tidegate.flow._core import (
    Decision,
    Limit,
    drive_async,
    drive_sync,
    new_holder_id,
)
from tidegate.flow.backends.base import AcquireParams, AsyncBackend, Backend, Status
from tidegate.flow.backends.memory import AsyncMemoryBackend, MemoryBackend
from tidegate.flow.permit import AsyncPermit, Permit
from tidegate.logging import get_logger

__all__ = ["AsyncControl", "SyncControl", "resolve_async_backend", "resolve_backend"]

log = get_logger("tidegate.flow")


def resolve_backend(store: Any) -> Backend:
    """A sync backend from a ``redis.Redis``, a URL (``redis://``, ``memory://``) or a backend."""
    if isinstance(store, redis.Redis):
        from tidegate.flow.backends.redis import RedisBackend

        return RedisBackend(store)
    if isinstance(store, str):
        if store == "memory://":
            return MemoryBackend()
        return resolve_backend(client_from_url(store))
    if isinstance(store, Backend):
        return store
    raise ConfigurationError(
        f"expected redis.Redis, a redis:// or memory:// URL, or a Backend; got {type(store)!r}"
    )


def resolve_async_backend(store: Any) -> AsyncBackend:
    """The asyncio twin of :func:`resolve_backend` (``redis.asyncio.Redis`` or a URL)."""
    if isinstance(store, redis.asyncio.Redis):
        from tidegate.flow.backends.redis import AsyncRedisBackend

        return AsyncRedisBackend(store)
    if isinstance(store, str):
        if store == "memory://":
            return AsyncMemoryBackend()
        return resolve_async_backend(async_client_from_url(store))
    if isinstance(store, MemoryBackend):
        return AsyncMemoryBackend(store)
    if isinstance(store, AsyncBackend):
        return store
    raise ConfigurationError(
        f"expected redis.asyncio.Redis, a URL, or an AsyncBackend; got {type(store)!r}"
    )


def _unavailable(limit: Limit, exc: BackendUnavailable, fail_open: bool) -> Decision:
    if not fail_open:
        log.error("downstream_gate_backend_unavailable", downstream=limit.name, policy="closed")
        raise exc
    log.warning("downstream_gate_backend_unavailable", downstream=limit.name, policy="open")
    return Decision(True, 0.0, -1, "fail_open")


def _log_release_failed(limit: Limit, holder: str) -> None:
    """A release that cannot reach Redis is not the call's failure: the lease expires on
    its own after ``lease_s``. Raising here would make a delivered unit look failed (and
    be sent again)."""
    log.warning("gate_lease_release_failed", downstream=limit.name, holder=holder)


def _lease_s(limit: Limit, lease_ms: float | None) -> float:
    """The lease length a permit renews by: the one its admission used (the live value
    of ``gate set --lease-s`` overrides the process's default), so the lease is renewed
    every third of its real length and extended by it. The default when the decision
    did not say (no backend, a rate-only decision) or said something unusable."""
    if lease_ms is not None and math.isfinite(lease_ms) and lease_ms > 0:
        return lease_ms / 1000.0
    return limit.lease_s


class _Control:
    """What both twins hold: the limit, the fail-open policy, cached request shapes."""

    def __init__(self, limit: Limit, *, fail_open: bool) -> None:
        self.limit = limit
        self.fail_open = fail_open
        self._wake_cap = max(1, limit.concurrency)
        # A lease can only be taken where a cap exists or may be configured live, and the
        # limit takes leases at all; a plain rate limit (or a no-lease gate) needs no
        # holder id, so its try-only parameters never change.
        self._leases = limit.leases and (limit.concurrency > 0 or limit.read_config)
        self._try_params: dict[int, AcquireParams] = {}

    @property
    def name(self) -> str:
        return self.limit.name

    def _try_request(self, cost: int) -> tuple[str, AcquireParams]:
        if self._leases:
            holder = new_holder_id()
            return holder, self.limit.params(cost, 0.0, holder)
        params = self._try_params.get(cost)
        if params is None:
            params = self._try_params[cost] = self.limit.params(cost, 0.0, "")
        return "", params


class SyncControl(_Control):
    """Shared sync machinery: try-only decisions and full admissions."""

    def __init__(self, store: Any, limit: Limit, *, fail_open: bool) -> None:
        super().__init__(limit, fail_open=fail_open)
        self.backend: Backend = resolve_backend(store)

    def _permit(
        self,
        holder: str,
        *,
        leased: bool,
        waited_s: float,
        admitted_ms: float | None = None,
        lease_ms: float | None = None,
    ) -> Permit:
        return Permit(
            self.backend,
            self.limit.name,
            self.limit.keys,
            holder=holder,
            leased=leased,
            waited_s=waited_s,
            lease_s=_lease_s(self.limit, lease_ms),
            wake_cap=self._wake_cap,
            admitted_ms=admitted_ms,
        )

    def _try(self, cost: int) -> Decision:
        self.limit.check_cost(cost)
        holder, params = self._try_request(cost)
        try:
            result = self.backend.acquire(self.limit.keys, params)
        except BackendUnavailable as exc:
            return _unavailable(self.limit, exc, self.fail_open)
        if result.status is not Status.ADMITTED:
            return self.limit.refusal(result)
        permit = (
            self._permit(
                holder,
                leased=True,
                waited_s=0.0,
                admitted_ms=result.now_ms,
                lease_ms=result.lease_ms,
            )
            if result.leased
            else None
        )
        return Decision(True, 0.0, result.remaining, "admitted", permit)

    def _admit(self, cost: int, max_wait: float) -> Permit:
        self.limit.check_cost(cost)
        holder = new_holder_id() if self._leases else ""
        flow = self.limit.admission(cost, max_wait, holder, self.backend.monotonic())
        try:
            admitted = drive_sync(flow, self.backend, self.limit.keys)
        except BackendUnavailable as exc:
            _unavailable(self.limit, exc, self.fail_open)
            return self._permit(holder, leased=False, waited_s=0.0)
        return self._permit(
            holder,
            leased=admitted.leased,
            waited_s=admitted.waited_s,
            admitted_ms=admitted.admitted_ms,
            lease_ms=admitted.lease_ms,
        )

    @contextlib.contextmanager
    def _slot(self, cost: int, max_wait: float, auto_renew: bool) -> Iterator[Permit]:
        permit = self._admit(cost, max_wait)
        if auto_renew:
            permit.start_renewing()
        try:
            with holding(self.limit.name, permit.admitted_ms, permit.waited_s):
                yield permit
        finally:
            try:
                permit.release()
            except BackendError:
                _log_release_failed(self.limit, permit.holder)


class AsyncControl(_Control):
    """The asyncio twin of :class:`SyncControl`."""

    def __init__(self, store: Any, limit: Limit, *, fail_open: bool) -> None:
        super().__init__(limit, fail_open=fail_open)
        self.backend: AsyncBackend = resolve_async_backend(store)

    def _permit(
        self,
        holder: str,
        *,
        leased: bool,
        waited_s: float,
        admitted_ms: float | None = None,
        lease_ms: float | None = None,
    ) -> AsyncPermit:
        return AsyncPermit(
            self.backend,
            self.limit.name,
            self.limit.keys,
            holder=holder,
            leased=leased,
            waited_s=waited_s,
            lease_s=_lease_s(self.limit, lease_ms),
            wake_cap=self._wake_cap,
            admitted_ms=admitted_ms,
        )

    async def _try(self, cost: int) -> Decision:
        self.limit.check_cost(cost)
        holder, params = self._try_request(cost)
        try:
            result = await self.backend.acquire(self.limit.keys, params)
        except BackendUnavailable as exc:
            return _unavailable(self.limit, exc, self.fail_open)
        if result.status is not Status.ADMITTED:
            return self.limit.refusal(result)
        permit = (
            self._permit(
                holder,
                leased=True,
                waited_s=0.0,
                admitted_ms=result.now_ms,
                lease_ms=result.lease_ms,
            )
            if result.leased
            else None
        )
        return Decision(True, 0.0, result.remaining, "admitted", permit)

    async def _admit(self, cost: int, max_wait: float) -> AsyncPermit:
        self.limit.check_cost(cost)
        holder = new_holder_id() if self._leases else ""
        flow = self.limit.admission(cost, max_wait, holder, self.backend.monotonic())
        try:
            admitted = await drive_async(flow, self.backend, self.limit.keys)
        except BackendUnavailable as exc:
            _unavailable(self.limit, exc, self.fail_open)
            return self._permit(holder, leased=False, waited_s=0.0)
        return self._permit(
            holder,
            leased=admitted.leased,
            waited_s=admitted.waited_s,
            admitted_ms=admitted.admitted_ms,
            lease_ms=admitted.lease_ms,
        )

    @contextlib.asynccontextmanager
    async def _slot(
        self, cost: int, max_wait: float, auto_renew: bool
    ) -> AsyncIterator[AsyncPermit]:
        permit = await self._admit(cost, max_wait)
        if auto_renew:
            permit.start_renewing()
        try:
            with holding(self.limit.name, permit.admitted_ms, permit.waited_s):
                yield permit
        finally:
            try:
                await permit.release()
            except BackendError:
                _log_release_failed(self.limit, permit.holder)
