"""A permit is proof of admission, and the concurrency lease that goes with it.

Release it when the downstream call is done (``with gate.slot():`` does that in
``finally``). A holder that dies without releasing loses its lease when the lease
expires, and the next admission reclaims the slot: a SIGKILLed worker never leaks
capacity. A call that may run longer than the lease renews it — ``slot()`` starts a
renewer that extends the lease every third of its length until release.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
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


class Permit(_PermitBase):
    """A sync permit; see the module docstring."""

    __slots__ = ("_backend", "_renewer", "_stop")

    def __init__(self, backend: Backend, name: str, keys: GateKeys, **kwargs: object) -> None:
        super().__init__(name, keys, **kwargs)  # type: ignore[arg-type]
        self._backend = backend
        self._valid_until = backend.monotonic() + self._lease_s
        self._stop: threading.Event | None = None
        self._renewer: threading.Thread | None = None

    def release(self) -> bool:
        """Give the slot back; False if the lease had already expired (it overran)."""
        if self._done:
            return True
        self._done = True
        self._stop_renewer()
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
        """Renew every ``lease_s / 3`` in a daemon thread until released."""
        if self._done or self._renewer is not None:
            return
        stop = self._stop = threading.Event()

        def run() -> None:
            while not stop.wait(self._lease_s / 3):
                try:
                    if not self.renew():
                        return
                except BackendError:
                    log.warning("gate_lease_renew_failed", downstream=self.name)

        self._renewer = threading.Thread(
            target=run, name=f"tidegate-renew-{self.name}", daemon=True
        )
        self._renewer.start()

    def _stop_renewer(self) -> None:
        if self._stop is not None:
            self._stop.set()

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
