"""Settings from the environment (``TIDEGATE_*``), read once per process.

One :class:`Settings` object holds everything a worker, an RQ job or a CLI command
reads from the environment: Redis and the key prefix, fail-open, the orphan sweep's
interval, the queue watermarks, the sheddable classes, and per downstream
(:meth:`Settings.downstream`) its URL, gate shape, adaptive policy and commit wait.
It is read once (:meth:`Settings.load`) and handed to :class:`tidegate.runtime.Runtime`,
so a value cannot differ between two modules of one process, and a typo in any of
them is a :class:`~tidegate.errors.ConfigurationError` when the process starts, not
when the first document of that kind arrives.

The set of downstreams is open-ended (``TIDEGATE_<NAME>_RATE``, ``_BURST``,
``_CONCURRENCY``, ``_LEASE_S``, ``_URL``, ``_MAX_REQUEST_S``, ``_RELAY_DEPTH``,
``_ADAPTIVE…``), so a
downstream's part is parsed from the same snapshot of the environment when it is first
asked for, and kept. Gate values are only *defaults*: the live values are in Redis,
where an operator retunes a running fleet with ``tidegate gate set``.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, PrivateAttr, SecretStr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tidegate.errors import ConfigurationError
from tidegate.keys import DEFAULT_PREFIX

if TYPE_CHECKING:
    from tidegate.flow.adaptive import AdaptivePolicy
    from tidegate.load.shedding import SheddingPolicy
    from tidegate.load.watermarks import Watermarks

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_LEASE_S",
    "DEFAULT_RATE",
    "DEFAULT_SWEEP_INTERVAL_S",
    "MAX_BURST",
    "MAX_CONCURRENCY",
    "MAX_LEASE_S",
    "MAX_PAUSE_S",
    "MAX_RATE",
    "MAX_RELAY_DEPTH",
    "MIN_LEASE_S",
    "MIN_RATE",
    "PREFIX_PATTERN",
    "DownstreamSettings",
    "GatePolicy",
    "Settings",
    "adaptive_policy_from_env",
    "check_range",
    "env_stem",
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
#: Most requests a relay lane writes ahead on one connection (``_RELAY_DEPTH``).
MAX_RELAY_DEPTH = 16
#: Seconds between two orphan sweeps of the fleet (``TIDEGATE_SWEEP_INTERVAL_S``).
DEFAULT_SWEEP_INTERVAL_S = 30.0


@dataclass(frozen=True, slots=True)
class DownstreamSettings:
    """What the environment says about one downstream.

    Args:
        name: the downstream (``customs``, ``tos``): its gate's name.
        url: its base URL (``TIDEGATE_<NAME>_URL``), ``None`` when unset.
        gate: the gate's default shape (``_RATE``, ``_BURST``, ``_CONCURRENCY``,
            ``_LEASE_S``).
        adaptive: the adaptive controller's policy (``_ADAPTIVE`` and its box), ``None``
            when ``_ADAPTIVE`` is unset.
        max_request_s: how long it may take to finish a request it received
            (``_MAX_REQUEST_S``), ``None`` for no commit wait.
        relay_depth: ``_RELAY_DEPTH``: the fleet's calls go through the relay's lanes
            (:mod:`tidegate.downstream.relay`), this many written ahead on each
            connection; ``None`` (unset): every worker calls the downstream itself.
    """

    name: str
    url: str | None
    gate: GatePolicy
    adaptive: AdaptivePolicy | None
    max_request_s: float | None
    relay_depth: int | None = None


class Settings(BaseSettings):
    """The process's settings. Every field maps to ``TIDEGATE_<FIELD>``; the rest
    (watermarks, shedding, downstreams) comes from the same snapshot of the environment.

    Build it with :meth:`load` (which also checks the watermarks and the sheddable
    classes), once per process; ``Settings()`` alone reads nothing (all defaults).
    """

    model_config = SettingsConfigDict(env_prefix="TIDEGATE_", extra="ignore")

    #: Redis for gate state, parking, DLQ and quarantine. Unset: the embedded server.
    redis_url: SecretStr | None = None
    #: Prefix of every Redis key tidegate writes (one fleet, one prefix).
    prefix: str = Field(default=DEFAULT_PREFIX, min_length=1, pattern=PREFIX_PATTERN)
    log_level: str = "INFO"
    #: Admit work when Redis is unreachable (``True``) or refuse it (``False``, default).
    fail_open: bool = False
    #: Seconds between two armed orphan sweeps (the Celery integration's sweep).
    sweep_interval_s: float = Field(default=DEFAULT_SWEEP_INTERVAL_S, gt=0, allow_inf_nan=False)

    _environ: dict[str, str] = PrivateAttr(default_factory=dict)
    _downstreams: dict[str, DownstreamSettings] = PrivateAttr(default_factory=dict)
    _parsed: dict[str, Any] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what :meth:`load` passes: it has already read the one mapping, so a
        test's mapping is the whole truth and the process environment is read once."""
        return (init_settings,)

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings once from ``env`` (default: the process environment).

        Raises:
            ConfigurationError: any value that cannot be used (a prefix with a space,
                an interval of 0, inverted watermarks, an unknown sheddable class),
                naming the variable.
        """
        environ = dict(os.environ if env is None else env)
        fields = {
            name: environ[f"TIDEGATE_{name.upper()}"]
            for name in cls.model_fields
            if f"TIDEGATE_{name.upper()}" in environ
        }
        try:
            settings = cls.model_validate(fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"TIDEGATE_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigurationError(f"invalid settings: {problems}") from None
        settings._environ = environ
        settings.watermarks  # noqa: B018 - parsed now, so a typo fails at start
        settings.shedding  # noqa: B018
        return settings

    @property
    def environ(self) -> Mapping[str, str]:
        """The snapshot of the environment these settings were read from."""
        return self._environ

    @property
    def watermarks(self) -> Watermarks:
        """Default queue watermarks (``TIDEGATE_QUEUE_HWM``, ``_LWM``,
        ``TIDEGATE_SHED_AFTER_INTERVALS``); a queue's live values are in Redis."""
        from tidegate.load.watermarks import Watermarks

        return self._parse("watermarks", lambda: Watermarks.from_env(self._environ))  # type: ignore[no-any-return]

    @property
    def shedding(self) -> SheddingPolicy:
        """Which document classes may be quarantined under load
        (``TIDEGATE_SHEDDABLE_CLASSES``)."""
        from tidegate.load.shedding import SheddingPolicy

        return self._parse("shedding", lambda: SheddingPolicy.from_env(self._environ))  # type: ignore[no-any-return]

    def downstream(self, name: str) -> DownstreamSettings:
        """Downstream ``name``'s part, parsed on first use and kept.

        Raises:
            ConfigurationError: one of its values cannot be used (names the variable).
        """
        with self._lock:
            known = self._downstreams.get(name)
        if known is not None:
            return known
        stem = env_stem(name)
        try:
            parsed = DownstreamSettings(
                name=name,
                url=self._environ.get(stem + "URL", "").strip() or None,
                gate=gate_policy_from_env(name, self._environ),
                adaptive=adaptive_policy_from_env(name, self._environ),
                max_request_s=_seconds_or_none(self._environ, stem + "MAX_REQUEST_S"),
                relay_depth=_relay_depth(self._environ, stem + "RELAY_DEPTH"),
            )
            if parsed.relay_depth is not None and parsed.max_request_s is not None:
                # The commit wait counts from the `sending` mark, and a relayed request
                # may wait in the relay's queue after it: a lookup asked max_request_s
                # later could still come before the request ends.
                raise ConfigurationError(
                    "RELAY_DEPTH and MAX_REQUEST_S cannot both be set yet: a relayed "
                    "request may start after its commit wait began"
                )
            if parsed.relay_depth is not None and parsed.gate.concurrency < 1:
                # One lane per connection: without a cap every process's lane would
                # open one, and nothing would bound the downstream's connections.
                raise ConfigurationError(
                    "RELAY_DEPTH needs CONCURRENCY (the downstream's connections, one "
                    "relay lane each)"
                )
        except ConfigurationError as exc:
            raise ConfigurationError(f"downstream {name!r} ({stem}*): {exc}") from None
        with self._lock:
            return self._downstreams.setdefault(name, parsed)

    def _parse(self, what: str, parse: Any) -> Any:
        with self._lock:
            if what not in self._parsed:
                self._parsed[what] = parse()
            return self._parsed[what]


def env_stem(name: str) -> str:
    """``TIDEGATE_<NAME>_`` for downstream ``name`` (``-`` and ``.`` become ``_``)."""
    return f"TIDEGATE_{name.upper().replace('-', '_').replace('.', '_')}_"


def _seconds_or_none(env: Mapping[str, str], key: str) -> float | None:
    raw = env.get(key, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigurationError(f"{key} must be a finite number >= 0, got {raw!r}")
    return seconds


def _relay_depth(env: Mapping[str, str], key: str) -> int | None:
    raw = env.get(key, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_RELAY_DEPTH:
        raise ConfigurationError(
            f"{key} must be a whole number in [1, {MAX_RELAY_DEPTH}], got {raw!r}"
        )
    return int(raw)


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
    stem = env_stem(name)
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
