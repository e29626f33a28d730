"""The gate of one downstream: rate + concurrency + a fleet-wide pause, in one decision.

Every worker process on every host that talks to, say, the customs gateway goes
through ``Gate(client, "customs")``. One Lua script checks the pause, the lease count
and the GCRA bucket atomically, and reserves both the rate slot and the lease in the
same round trip. The parameters live in Redis (``tidegate gate set customs --rate
0.5``), so an operator retunes a running fleet without a restart; the environment
(``TIDEGATE_CUSTOMS_RATE`` …) only gives the defaults.

When the downstream answers 429 with Retry-After, one worker calls ``gate.pause()`` and
every acquire on every host waits it out — instead of each worker discovering the 429
on its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import redis

from tidegate._redis import map_redis_errors, text
from tidegate.errors import ConfigurationError
from tidegate.events import GatePaused, GateResumed, emit
from tidegate.flow._control import AsyncControl, SyncControl
from tidegate.flow._core import DEFAULT_MAX_WAIT_S, Decision, Limit
from tidegate.flow.backends.base import GateSnapshot
from tidegate.flow.permit import AsyncPermit, Permit
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.logging import get_logger
from tidegate.settings import MAX_PAUSE_S, GatePolicy, check_range, gate_policy_from_env

__all__ = ["AsyncGate", "Gate", "GateState", "fleet_gate_names"]

log = get_logger("tidegate.flow")


@dataclass(frozen=True, slots=True)
class GateState:
    """What ``tidegate gate show`` prints: the effective policy and the live state."""

    name: str
    policy: GatePolicy
    overridden: tuple[str, ...]
    paused_for_s: float
    pause_reason: str | None
    leases_held: int
    tokens_available: int
    #: Live values stored in Redis that no valid policy allows (written before values
    #: were range-checked). They are shown, never used for a decision here, and a
    #: ``configure`` of the same field replaces them.
    invalid: dict[str, float] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values only: an invalid stored value is shown as its ``repr``
        (``"inf"``), because ``Infinity`` is not JSON."""
        return {
            "name": self.name,
            "rate": self.policy.rate,
            "burst": self.policy.burst,
            "concurrency": self.policy.concurrency,
            "lease_s": self.policy.lease_s,
            "overridden": list(self.overridden),
            "invalid": {name: repr(value) for name, value in sorted(self.invalid.items())},
            "paused_for_s": round(self.paused_for_s, 3),
            "pause_reason": self.pause_reason,
            "leases_held": self.leases_held,
            "tokens_available": self.tokens_available,
        }


def _gate_limit(
    name: str, policy: GatePolicy, prefix: str, *, leases: bool = True, tokens: bool = True
) -> Limit:
    return Limit.build(
        name,
        kind="gate",
        prefix=prefix,
        rate=policy.rate,
        burst=policy.burst,
        concurrency=policy.concurrency,
        lease_s=policy.lease_s,
        check_pause=True,
        read_config=True,
        leases=leases,
        tokens=tokens,
    )


def _live_values(config: dict[str, float]) -> dict[str, float]:
    """The config hash in policy units (``lease_ms`` is stored, ``lease_s`` is shown)."""
    return {
        ("lease_s" if key == "lease_ms" else key): (value / 1000.0 if key == "lease_ms" else value)
        for key, value in config.items()
        if key in {"rate", "burst", "concurrency", "lease_ms"}
    }


def _effective(
    defaults: GatePolicy, config: dict[str, float]
) -> tuple[GatePolicy, dict[str, float]]:
    """The policy the live values make, and the live values no policy allows.

    Each live value is checked on its own, so one corrupt field (an infinite lease
    stored by an older version) neither hides the valid ones nor makes the gate
    unreadable — and ``configure`` can still overwrite it.
    """
    policy = defaults
    invalid: dict[str, float] = {}
    for field, value in sorted(_live_values(config).items()):
        typed: Any = (
            int(value) if field in {"burst", "concurrency"} and float(value).is_integer() else value
        )
        try:
            policy = dataclasses.replace(policy, **{field: typed})
        except ConfigurationError:
            invalid[field] = value
    return policy, invalid


def _state(name: str, defaults: GatePolicy, snap: GateSnapshot) -> GateState:
    policy, invalid = _effective(defaults, snap.config)
    interval = 1000.0 / policy.rate
    tat = max(snap.tat_ms or snap.now_ms, snap.now_ms)
    tokens = max(0, math.floor((snap.now_ms + policy.burst * interval - tat) / interval))
    paused = (snap.paused_until_ms - snap.now_ms) / 1000.0 if snap.paused_until_ms else 0.0
    overridden = tuple(sorted("lease_s" if k == "lease_ms" else k for k in snap.config))
    return GateState(
        name,
        policy,
        overridden,
        max(0.0, paused),
        snap.pause_reason,
        snap.leases_held,
        min(tokens, policy.burst),
        invalid,
    )


def _in_use(snap: GateSnapshot) -> bool:
    """Whether the fleet holds anything for this gate: live config, a pause, leases or
    a rate bucket that is not full."""
    paused = snap.paused_until_ms is not None and snap.paused_until_ms > snap.now_ms
    return bool(snap.config) or paused or snap.leases_held > 0 or snap.tat_ms is not None


def fleet_gate_names(client: redis.Redis, *, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """The names of the gates the fleet holds state or live config for under ``prefix``.

    A gate that nobody has used or retuned since its keys expired has no key, so it is
    not listed: the list says what the fleet is doing, not what it could do. Read with
    SCAN (never KEYS), so a large keyspace is not blocked.
    """
    keys = Keyspace(prefix)
    names: set[str] = set()
    with map_redis_errors("list gates"):
        for raw in client.scan_iter(match=keys.limits_pattern(), count=1000):
            name = keys.limit_name(text(raw))
            if name is not None:
                names.add(name)
    return sorted(names)


def _changes(
    current: GatePolicy,
    rate: float | None,
    burst: int | None,
    concurrency: int | None,
    lease_s: float | None,
) -> dict[str, float]:
    """Validate a retune against the current policy; return the values to store."""
    updated = GatePolicy(
        rate=current.rate if rate is None else rate,
        burst=current.burst if burst is None else burst,
        concurrency=current.concurrency if concurrency is None else concurrency,
        lease_s=current.lease_s if lease_s is None else lease_s,
    )
    values: dict[str, float] = {}
    if rate is not None:
        values["rate"] = updated.rate
    if burst is not None:
        values["burst"] = updated.burst
    if concurrency is not None:
        values["concurrency"] = updated.concurrency
    if lease_s is not None:
        values["lease_ms"] = updated.lease_s * 1000.0
    if not values:
        raise ConfigurationError("nothing to change: give rate, burst, concurrency or lease_s")
    return values


def _pause_ms(seconds: float) -> float:
    """A pause is only ever extended, so an absurd one could not be shortened but by a
    resume: the range is checked before anything is written."""
    check_range("pause seconds", seconds, 0.0, MAX_PAUSE_S)
    if seconds <= 0:
        raise ConfigurationError(f"pause seconds must be > 0, got {seconds!r}")
    return seconds * 1000.0


def _log_pause(name: str, seconds: float, reason: str, until_ms: float, extended: bool) -> None:
    emit(GatePaused(name, round(seconds, 3), reason, extended, round(until_ms)))


class Gate(SyncControl):
    """The fleet-wide gate of one downstream.

    Args:
        store: a ``redis.Redis``, a ``redis://``/``rediss://`` URL, or a backend.
        name: the downstream (``customs``, ``tos``…); shared by every process.
        policy: default shape; read from ``TIDEGATE_<NAME>_*`` when omitted. Live
            values set with :meth:`configure` (or the CLI) take precedence.
        fail_open: admit when Redis is unreachable (default: fail closed).
        leases: take a concurrency lease with each admission (the default). ``False``
            admits on the fleet-wide pause and the rate only, for workers whose calls go
            through a relay: the relay's lanes hold the gate's leases (each one a
            connection it pipelines requests on), so a worker must neither take one nor
            wait for one. Such a permit has nothing to release or renew; its admissions
            still count in :meth:`admitted_total`, and :meth:`state` still shows the
            leases the fleet holds.
        tokens: take a rate token with each admission (the default). ``False`` takes
            the lease (and waits out a pause) without one: a relay lane's lease, whose
            calls' tokens their workers took.

    Example::

        gate = Gate(client, "customs")
        with gate.slot(max_wait=20):
            client.send("/declarations", doc, idempotency_key=key)
    """

    def __init__(
        self,
        store: Any,
        name: str,
        *,
        policy: GatePolicy | None = None,
        prefix: str = DEFAULT_PREFIX,
        fail_open: bool = False,
        leases: bool = True,
        tokens: bool = True,
    ) -> None:
        self.defaults = policy if policy is not None else gate_policy_from_env(name)
        limit = _gate_limit(name, self.defaults, prefix, leases=leases, tokens=tokens)
        super().__init__(store, limit, fail_open=fail_open)

    def try_acquire(self, n: int = 1) -> Decision:
        """Admit now or not at all; an admitted decision may carry a permit to release."""
        return self._try(n)

    def acquire(self, n: int = 1, *, max_wait: float = DEFAULT_MAX_WAIT_S) -> Permit:
        """Wait (at most ``max_wait``) for admission; release the permit after the call.

        Raises:
            Throttled: not admissible within ``max_wait`` (nothing consumed).
            BackendUnavailable: Redis unreachable and the gate fails closed.
        """
        return self._admit(n, max_wait)

    @contextlib.contextmanager
    def slot(
        self, n: int = 1, *, max_wait: float = DEFAULT_MAX_WAIT_S, auto_renew: bool = True
    ) -> Iterator[Permit]:
        """Admission for the duration of the block; the lease is renewed and released."""
        with self._slot(n, max_wait, auto_renew) as permit:
            yield permit

    def pause(self, seconds: float, reason: str) -> float:
        """Stop every admission fleet-wide for ``seconds`` (never shortens a pause).

        Returns:
            Seconds until the pause (possibly an existing, longer one) ends.

        Raises:
            ConfigurationError: ``seconds`` is not in (0, :data:`MAX_PAUSE_S`]; nothing
                is written.
        """
        until_ms, extended = self.backend.pause(self.limit.keys, _pause_ms(seconds), reason)
        _log_pause(self.name, seconds, reason, until_ms, extended)
        return self.state().paused_for_s

    def resume(self) -> None:
        """End a pause now."""
        self.backend.resume(self.limit.keys)
        emit(GateResumed(self.name))

    def configure(
        self,
        *,
        rate: float | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
        lease_s: float | None = None,
    ) -> GateState:
        """Retune the running fleet; values are validated against the current policy.

        Raises:
            ConfigurationError: nothing to change, or a value outside its range (see
                :class:`~tidegate.settings.GatePolicy`); nothing is written.
        """
        values = _changes(self.state().policy, rate, burst, concurrency, lease_s)
        self.backend.write_config(self.limit.keys, values)
        log.warning("downstream_gate_configured", downstream=self.name, **values)
        return self.state()

    def state(self) -> GateState:
        """The effective policy, pause and lease count, read from the backend."""
        return _state(self.name, self.defaults, self.backend.snapshot(self.limit.keys))

    def in_use(self) -> bool:
        """Whether the backend holds live config, a pause, leases or a bucket for this gate."""
        return _in_use(self.backend.snapshot(self.limit.keys))

    def admitted_total(self) -> int:
        """Tokens admitted so far, fleet-wide (a monotonic counter: take deltas for a rate)."""
        return self.backend.snapshot(self.limit.keys).admitted_total


class AsyncGate(AsyncControl):
    """The asyncio twin of :class:`Gate` (``leases=False`` as there: the pause and the
    rate only, for workers behind a relay whose lanes hold the leases; ``tokens=False``:
    the lease and the pause only, for the lanes)."""

    def __init__(
        self,
        store: Any,
        name: str,
        *,
        policy: GatePolicy | None = None,
        prefix: str = DEFAULT_PREFIX,
        fail_open: bool = False,
        leases: bool = True,
        tokens: bool = True,
    ) -> None:
        self.defaults = policy if policy is not None else gate_policy_from_env(name)
        limit = _gate_limit(name, self.defaults, prefix, leases=leases, tokens=tokens)
        super().__init__(store, limit, fail_open=fail_open)

    async def try_acquire(self, n: int = 1) -> Decision:
        """Admit now or not at all."""
        return await self._try(n)

    async def acquire(self, n: int = 1, *, max_wait: float = DEFAULT_MAX_WAIT_S) -> AsyncPermit:
        """Wait (at most ``max_wait``) for admission; ``await permit.release()`` after."""
        return await self._admit(n, max_wait)

    @contextlib.asynccontextmanager
    async def slot(
        self, n: int = 1, *, max_wait: float = DEFAULT_MAX_WAIT_S, auto_renew: bool = True
    ) -> AsyncIterator[AsyncPermit]:
        """Admission for the duration of the block; the lease is renewed and released."""
        async with self._slot(n, max_wait, auto_renew) as permit:
            yield permit

    async def pause(self, seconds: float, reason: str) -> float:
        """Stop every admission fleet-wide for ``seconds`` (never shortens a pause)."""
        until_ms, extended = await self.backend.pause(self.limit.keys, _pause_ms(seconds), reason)
        _log_pause(self.name, seconds, reason, until_ms, extended)
        return (await self.state()).paused_for_s

    async def resume(self) -> None:
        """End a pause now."""
        await self.backend.resume(self.limit.keys)
        emit(GateResumed(self.name))

    async def configure(
        self,
        *,
        rate: float | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
        lease_s: float | None = None,
    ) -> GateState:
        """Retune the running fleet; values are validated against the current policy."""
        values = _changes((await self.state()).policy, rate, burst, concurrency, lease_s)
        await self.backend.write_config(self.limit.keys, values)
        log.warning("downstream_gate_configured", downstream=self.name, **values)
        return await self.state()

    async def state(self) -> GateState:
        """The effective policy, pause and lease count, read from the backend."""
        return _state(self.name, self.defaults, await self.backend.snapshot(self.limit.keys))

    async def in_use(self) -> bool:
        """Whether the backend holds live config, a pause, leases or a bucket for this gate."""
        return _in_use(await self.backend.snapshot(self.limit.keys))

    async def admitted_total(self) -> int:
        """Tokens admitted so far, fleet-wide (a monotonic counter: take deltas for a rate)."""
        return (await self.backend.snapshot(self.limit.keys)).admitted_total
