"""A permit is proof of admission, and the concurrency lease that goes with it.

Release it when the downstream call is done (``with gate.slot():`` does that in
``finally``). A holder that dies without releasing loses its lease when the lease
expires, and the next admission reclaims the slot: a SIGKILLed worker never leaks
capacity. A call that may run longer than the lease renews it — ``slot()`` has the
lease extended every third of its length until release.

Sync permits share one renewer thread per process (:class:`_Renewals`): a thread of its
own per permit was started inside the slot, and ``Thread.start`` waits until the new
thread runs — on a busy host, milliseconds of every call spent holding a lease with no
request in service (``bench/tos_turn.py``). Handing a permit to the shared thread is a
heap push. One renewal that stalls (Redis slow to answer) delays the others by as much;
with renewals every third of the lease, a stall shorter than two thirds of it loses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import os
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

from tidegate.errors import BackendError
from tidegate.flow.backends.base import RENEW_LOST, RENEW_RESTORED
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from tidegate.flow.backends.base import AsyncBackend, Backend, GateKeys

__all__ = ["AsyncPermit", "Permit"]

log = get_logger("tidegate.flow")


class _PermitBase:
    __slots__ = (
        "_done",
        "_keys",
        "_lease_s",
        "_valid_until",
        "_wake_cap",
        "admitted_ms",
        "holder",
        "leased",
        "name",
        "waited_s",
    )

    def __init__(
        self,
        name: str,
        keys: GateKeys,
        *,
        holder: str,
        leased: bool,
        waited_s: float,
        lease_s: float,
        wake_cap: int,
        admitted_ms: float | None = None,
    ) -> None:
        self.name = name
        #: When the gate admitted this call (fleet clock, ms; ``None``: admitted without
        #: the backend). A 429 to it is an echo if the rate was cut after this.
        self.admitted_ms = admitted_ms
        self._keys = keys
        self.holder = holder
        #: A concurrency lease is held (and must be released).
        self.leased = leased
        #: Seconds this admission waited for its slot.
        self.waited_s = waited_s
        self._lease_s = lease_s
        self._wake_cap = wake_cap
        self._done = not leased
        #: When this holder's lease runs out by its own reckoning (backend monotonic
        #: clock): set at admission (the lease started at the decision, just before)
        #: and at each renewal from the instant the request was sent.
        self._valid_until = 0.0

    @property
    def lease_s(self) -> float:
        """The lease length, seconds: the one the admission used (a live value set with
        ``tidegate gate set --lease-s`` over the default). Renewed every third of it,
        each renewal extending the lease by it."""
        return self._lease_s

    def _log_lost(self) -> None:
        log.warning("gate_lease_lost", downstream=self.name, holder=self.holder)

    def _renewed(self, status: int, sent: float) -> bool:
        """Account for a renewal's answer (sent at ``sent``); True if the lease is held."""
        if status == RENEW_LOST:
            self._log_lost()
            return False
        if status == RENEW_RESTORED:
            # The store had lost it (a failover): the call still runs, so it counts again.
            log.warning("gate_lease_restored", downstream=self.name, holder=self.holder)
        self._valid_until = sent + self._lease_s
        return True


#: A process that holds no renewed lease this long lets its renewer thread go: a worker
#: holds none for milliseconds between two calls; a test's teardown waits no longer.
_IDLE_EXIT_S = 0.5


class _Renewals:
    """One daemon thread per process that renews every sync permit handed to it.

    Entries are ``(due, seq, permit)`` in a heap on this process's monotonic clock (real
    time, as the per-permit threads waited before: a test's manual clock is the
    backend's, not this one); a released permit's entry is removed. The thread is
    started by the first permit after an idle spell of :data:`_IDLE_EXIT_S` and ends
    after the next one; a forked child starts its own (``fork`` copies no thread), with a
    fresh lock.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Permit]] = []
        self._seq = itertools.count()
        self._running = False

    def add(self, permit: Permit, every_s: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + every_s, next(self._seq), permit))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="tidegate-renew", daemon=True).start()
            self._cond.notify()

    def discard(self, permit: Permit) -> None:
        with self._cond:
            kept = [entry for entry in self._heap if entry[2] is not permit]
            if len(kept) != len(self._heap):
                heapq.heapify(kept)
                self._heap = kept
                self._cond.notify()

    def _next_due(self) -> Permit | None:
        """Block until a held permit's renewal is due and return it (its entry popped);
        ``None`` when none was held for :data:`_IDLE_EXIT_S` (the thread then ends)."""
        idle_until: float | None = None
        with self._cond:
            while True:
                now = time.monotonic()
                if not self._heap:
                    idle_until = now + _IDLE_EXIT_S if idle_until is None else idle_until
                    if now >= idle_until:
                        self._running = False
                        return None
                    self._cond.wait(idle_until - now)
                    continue
                idle_until = None
                due, _, permit = self._heap[0]
                if permit._done:
                    heapq.heappop(self._heap)
                elif due <= now:
                    heapq.heappop(self._heap)
                    return permit
                else:
                    self._cond.wait(due - now)

    def _run(self) -> None:
        while (permit := self._next_due()) is not None:
            try:
                held = permit.renew()
            except BackendError:
                log.warning("gate_lease_renew_failed", downstream=permit.name)
                held = True
            if held and not permit._done:
                self.add(permit, permit._lease_s / 3)


_RENEWALS = _Renewals()


class Permit(_PermitBase):
    """A sync permit; see the module docstring."""

    __slots__ = ("_backend", "_renewing")

    def __init__(self, backend: Backend, name: str, keys: GateKeys, **kwargs: object) -> None:
        super().__init__(name, keys, **kwargs)  # type: ignore[arg-type]
        self._backend = backend
        self._valid_until = backend.monotonic() + self._lease_s
        self._renewing = False

    def release(self) -> bool:
        """Give the slot back; False if the lease had already expired (it overran)."""
        if self._done:
            return True
        self._done = True
        if self._renewing:
            _RENEWALS.discard(self)
        released = self._backend.release(self._keys, self.holder, wake_cap=self._wake_cap)
        if not released:
            self._log_lost()
        return released

    def renew(self) -> bool:
        """Extend the lease to a full ``lease_s`` from now; False if it was lost."""
        if self._done:
            return False
        sent = self._backend.monotonic()
        status = self._backend.renew(
            self._keys, self.holder, self._lease_s * 1000.0, restore=sent < self._valid_until
        )
        return self._renewed(status, sent)

    def start_renewing(self) -> None:
        """Renew every ``lease_s / 3`` until released (by the process's renewer thread)."""
        if self._done or self._renewing:
            return
        self._renewing = True
        _RENEWALS.add(self, self._lease_s / 3)

    def __enter__(self) -> Permit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class AsyncPermit(_PermitBase):
    """The asyncio twin of :class:`Permit` (the renewer is a task)."""

    __slots__ = ("_backend", "_renewer")

    def __init__(self, backend: AsyncBackend, name: str, keys: GateKeys, **kwargs: object) -> None:
        super().__init__(name, keys, **kwargs)  # type: ignore[arg-type]
        self._backend = backend
        self._valid_until = backend.monotonic() + self._lease_s
        self._renewer: asyncio.Task[None] | None = None

    async def release(self) -> bool:
        """Give the slot back; False if the lease had already expired."""
        if self._done:
            return True
        self._done = True
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        released = await self._backend.release(self._keys, self.holder, wake_cap=self._wake_cap)
        if not released:
            self._log_lost()
        return released

    async def renew(self) -> bool:
        """Extend the lease to a full ``lease_s`` from now; False if it was lost."""
        if self._done:
            return False
        sent = self._backend.monotonic()
        status = await self._backend.renew(
            self._keys, self.holder, self._lease_s * 1000.0, restore=sent < self._valid_until
        )
        return self._renewed(status, sent)

    def start_renewing(self) -> None:
        """Renew every ``lease_s / 3`` in a task until released."""
        if self._done or self._renewer is not None:
            return

        async def run() -> None:
            while True:
                await asyncio.sleep(self._lease_s / 3)
                try:
                    if not await self.renew():
                        return
                except BackendError:
                    log.warning("gate_lease_renew_failed", downstream=self.name)

        self._renewer = asyncio.get_running_loop().create_task(run())

    async def __aenter__(self) -> AsyncPermit:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()
