"""Settings from the environment (``TIDEGATE_*``), validated once.

Process-wide settings live in :class:`Settings`. Per-downstream gate defaults are read
from ``TIDEGATE_<NAME>_RATE`` / ``_BURST`` / ``_CONCURRENCY`` / ``_LEASE_S`` by
:func:`gate_policy_from_env`, because the set of downstreams is open-ended. Those are
only *defaults*: the live values are in Redis, where an operator retunes a running
fleet with ``tidegate gate set``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegate.errors import ConfigurationError
from tidegate.keys import DEFAULT_PREFIX

if TYPE_CHECKING:
    from tidegate.flow.adaptive import AdaptivePolicy

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_LEASE_S",
    "DEFAULT_RATE",
    "MAX_BURST",
    "MAX_CONCURRENCY",
    "MAX_LEASE_S",
    "MAX_PAUSE_S",
    "MAX_RATE",
    "MIN_LEASE_S",
    "MIN_RATE",
    "PREFIX_PATTERN",
    "GatePolicy",
    "Settings",
    "adaptive_policy_from_env",
    "check_range",
    "gate_policy_from_env",
]

#: Sustained admissions per second when nothing else is configured: deliberately low,
#: so an unconfigured downstream is protected rather than flooded.
DEFAULT_RATE = 1.0
#: Admissions allowed back to back.
DEFAULT_BURST = 1
#: Concurrent calls in flight; 0 means no cap.
DEFAULT_CONCURRENCY = 0
#: How long a concurrency lease lives without renewal before a crashed holder's slot
#: is reclaimed, in seconds.
DEFAULT_LEASE_S = 30.0

# The ranges below are what the Lua scripts and the GCRA maths stay exact in (ms since
# the epoch as doubles, PEXPIRE integers): a value outside them is an operator's typo,
# not a policy, and it is refused before anything is written.

#: Slowest sustained rate, admissions per second (one every ~2.8 hours).
MIN_RATE = 1e-4
#: Fastest sustained rate, admissions per second (the in-process overhead benchmark).
MAX_RATE = 1e6
#: Largest burst, tokens.
MAX_BURST = 1_000_000
#: Largest concurrency cap, calls in flight fleet-wide.
MAX_CONCURRENCY = 1_000_000
#: Shortest lease, seconds: a holder must be able to renew it at all.
MIN_LEASE_S = 0.01
#: Longest lease, seconds (a day): how long a killed holder's slot may stay taken.
MAX_LEASE_S = 86_400.0
#: Longest fleet-wide pause, seconds (a week); ``tidegate gate resume`` ends one sooner.
MAX_PAUSE_S = 604_800.0
#: What a key prefix may contain (it is part of every Redis key and SCAN pattern).
PREFIX_PATTERN = r"^[A-Za-z0-9_.:-]+$"


class Settings(BaseSettings):
    """Process-wide settings. Every field maps to ``TIDEGATE_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="TIDEGATE_", extra="ignore")

    #: Redis for gate state, parking, DLQ and quarantine. Unset: the embedded server.
    redis_url: SecretStr | None = None
    #: Prefix of every Redis key tidegate writes (one fleet, one prefix).
    prefix: str = Field(default=DEFAULT_PREFIX, min_length=1, pattern=PREFIX_PATTERN)
    log_level: str = "INFO"
    #: Admit work when Redis is unreachable (``True``) or refuse it (``False``, default).
    fail_open: bool = False


def check_range(name: str, value: float, low: float, high: float) -> float:
    """``value`` if it is a finite number in ``[low, high]``; else a ConfigurationError
    naming ``name`` and the range, so the caller never writes a value the fleet cannot use.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ConfigurationError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
    return value


def _check_whole(name: str, value: object, low: int, high: int, note: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(
            f"{name} must be an integer in [{low}, {high}]{note}, got {value!r}"
        )
    if not math.isfinite(value) or int(value) != value or not low <= value <= high:
        raise ConfigurationError(
            f"{name} must be an integer in [{low}, {high}]{note}, got {value!r}"
        )
    return int(value)


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """The shape of one downstream: sustained rate, burst, concurrency cap, lease.

    Args:
        rate: sustained admissions per second, in [:data:`MIN_RATE`, :data:`MAX_RATE`].
        burst: admissions allowed back to back, in [1, :data:`MAX_BURST`].
        concurrency: calls in flight at once across the fleet, in
            [0, :data:`MAX_CONCURRENCY`]; 0 means no cap.
        lease_s: how long a concurrency slot survives a holder that stopped renewing,
            in [:data:`MIN_LEASE_S`, :data:`MAX_LEASE_S`].

    Raises:
        ConfigurationError: a value outside its range, NaN or infinite; the message
            names the field and the range.

    Warning:
        A quota printed as "30 per minute" is usually enforced as a small per-second
        bucket. Configure ``rate=0.5, burst=2`` (the real shape), not ``rate=30/60,
        burst=30``: a burst of 30 would be answered with 429s.
    """

    rate: float = DEFAULT_RATE
    burst: int = DEFAULT_BURST
    concurrency: int = DEFAULT_CONCURRENCY
    lease_s: float = DEFAULT_LEASE_S

    def __post_init__(self) -> None:
        check_range("rate", self.rate, MIN_RATE, MAX_RATE)
        _check_whole("burst", self.burst, 1, MAX_BURST)
        _check_whole("concurrency", self.concurrency, 0, MAX_CONCURRENCY, " (0 = no cap)")
        check_range("lease_s", self.lease_s, MIN_LEASE_S, MAX_LEASE_S)


def _env_number(env: Mapping[str, str], key: str) -> float | None:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{key} must be a number, got {raw!r}") from None


def gate_policy_from_env(name: str, env: Mapping[str, str] | None = None) -> GatePolicy:
    """Defaults for gate ``name`` from ``TIDEGATE_<NAME>_{RATE,BURST,CONCURRENCY,LEASE_S}``."""
    source = os.environ if env is None else env
    stem = f"TIDEGATE_{name.upper().replace('-', '_').replace('.', '_')}_"
    base = GatePolicy()
    rate = _env_number(source, stem + "RATE")
    burst = _env_number(source, stem + "BURST")
    concurrency = _env_number(source, stem + "CONCURRENCY")
    lease = _env_number(source, stem + "LEASE_S")
    return GatePolicy(
        rate=base.rate if rate is None else rate,
        burst=base.burst if burst is None else _as_int(stem + "BURST", burst),
        concurrency=(
            base.concurrency if concurrency is None else _as_int(stem + "CONCURRENCY", concurrency)
        ),
        lease_s=base.lease_s if lease is None else lease,
    )


def adaptive_policy_from_env(
    name: str, env: Mapping[str, str] | None = None
) -> AdaptivePolicy | None:
    """Downstream ``name``'s adaptive policy from ``TIDEGATE_<NAME>_ADAPTIVE`` and its
    box (``_MIN_RATE``, ``_MAX_RATE``, ``_START_RATE``, ``_SUSPENSION_PRONE``,
    ``_MIN_CONCURRENCY``, ``_MAX_CONCURRENCY``); ``None`` when ``_ADAPTIVE`` is unset.
    See :mod:`tidegate.flow.adaptive._env`."""
    from tidegate.flow.adaptive._env import adaptive_policy_from_env as from_env

    return from_env(name, env)


def _as_int(key: str, value: float) -> int:
    if not value.is_integer():
        raise ConfigurationError(f"{key} must be a whole number, got {value!r}")
    return int(value)
