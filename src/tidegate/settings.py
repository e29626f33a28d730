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

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegate.errors import ConfigurationError

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_LEASE_S",
    "DEFAULT_RATE",
    "GatePolicy",
    "Settings",
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


class Settings(BaseSettings):
    """Process-wide settings. Every field maps to ``TIDEGATE_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="TIDEGATE_", extra="ignore")

    #: Redis for gate state, parking, DLQ and quarantine. Unset: the embedded server.
    redis_url: SecretStr | None = None
    #: Prefix of every Redis key tidegate writes (one fleet, one prefix).
    prefix: str = Field(default="tidegate", min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    log_level: str = "INFO"
    #: Admit work when Redis is unreachable (``True``) or refuse it (``False``, default).
    fail_open: bool = False


def _positive_float(name: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """The shape of one downstream: sustained rate, burst, concurrency cap, lease.

    Args:
        rate: sustained admissions per second (> 0, finite).
        burst: admissions allowed back to back (>= 1).
        concurrency: calls in flight at once across the fleet; 0 means no cap.
        lease_s: how long a concurrency slot survives a holder that stopped renewing.

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
        _positive_float("rate", float(self.rate))
        if isinstance(self.burst, bool) or int(self.burst) != self.burst or self.burst < 1:
            raise ConfigurationError(f"burst must be an integer >= 1, got {self.burst!r}")
        if (
            isinstance(self.concurrency, bool)
            or int(self.concurrency) != self.concurrency
            or self.concurrency < 0
        ):
            raise ConfigurationError(
                f"concurrency must be an integer >= 0 (0 = no cap), got {self.concurrency!r}"
            )
        _positive_float("lease_s", float(self.lease_s))


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


def _as_int(key: str, value: float) -> int:
    if not value.is_integer():
        raise ConfigurationError(f"{key} must be a whole number, got {value!r}")
    return int(value)
