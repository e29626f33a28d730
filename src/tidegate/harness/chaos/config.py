"""The configuration of a chaos run: the vessel burst, the fault, the workers' timing.

A :class:`ChaosConfig` *contains* the vessel scenario's
:class:`~tidegate.harness.scenarios.vessel.VesselConfig` (the burst, the downstreams, the
fleet) and adds only what is the fault's: its kind, when it strikes and for how long,
and each kind's own knobs. :meth:`ChaosConfig.tuned` is the one place where a flag or a
preset value is mapped onto the one or the other. :func:`preset` holds the benchmark's
and the test suite's shape of each kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from tidegate.errors import ConfigurationError
from tidegate.harness.scenarios.vessel import VesselConfig
from tidegate.integrations.celery.preset import UNACKED_MUTEX_EXPIRE_S

if TYPE_CHECKING:
    from collections.abc import Sequence

Kind = Literal[
    "kill-workers",
    "redis-restart",
    "host-crash",
    "downstream-outage",
    "slow-downstream",
    "slow-commit",
    "poison",
    "broker-restart",
    "redis-oom",
]
#: The scenarios, in the order the benchmark runs them (the order of ``Kind``).
KINDS: tuple[Kind, ...] = get_args(Kind)
#: The scenarios that restart Redis (on an append-only file, the production setting).
_RESTARTS = frozenset({"redis-restart", "host-crash"})
#: The ``-A`` of the scenario's workers: the vessel app with the timing below.
WORKER_APP = "tidegate.harness.chaos.worker_app:worker_app"

_ENV_SOFT = "TIDEGATE_CHAOS_SOFT_TIME_LIMIT_S"
_ENV_HARD = "TIDEGATE_CHAOS_HARD_TIME_LIMIT_S"
_ENV_VISIBILITY = "TIDEGATE_CHAOS_VISIBILITY_TIMEOUT_S"
_ENV_RESTORE = "TIDEGATE_CHAOS_RESTORE_INTERVAL_S"


@dataclass(frozen=True, slots=True)
class WorkerTiming:
    """Time limits, visibility timeout and lease length of the scenario's workers.

    Args:
        soft_time_limit_s: ``SoftTimeLimitExceeded`` after this (the task is parked).
        hard_time_limit_s: the pool process is killed after this.
        visibility_timeout_s: an unacknowledged message older than this is handed out
            again; at least 2 × the hard limit (the preset's rule), and the longest a
            message held by a SIGKILLed worker *main* process waits to be redelivered.
        restore_interval_s: how often each worker sweeps ``unacked`` for such messages.
        lease_s: concurrency lease length: how long a SIGKILLed holder keeps its slot.
        orphan_sweep_s: the fleet's orphan-sweep interval (a message the broker lost
            is republished after two to three of them).
    """

    soft_time_limit_s: float = 25.0
    hard_time_limit_s: float = 30.0
    visibility_timeout_s: float = 60.0
    restore_interval_s: float = 1.0
    lease_s: float = 5.0
    orphan_sweep_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.soft_time_limit_s < self.hard_time_limit_s:
            raise ConfigurationError("need 0 < soft_time_limit_s < hard_time_limit_s")
        if self.visibility_timeout_s < 2 * self.hard_time_limit_s:
            raise ConfigurationError("visibility_timeout_s must be >= 2 × hard_time_limit_s")
        if self.restore_interval_s <= 0 or self.lease_s <= 0:
            raise ConfigurationError("restore_interval_s and lease_s must be > 0")

    def env(self) -> dict[str, str]:
        return {
            _ENV_SOFT: repr(self.soft_time_limit_s),
            _ENV_HARD: repr(self.hard_time_limit_s),
            _ENV_VISIBILITY: repr(self.visibility_timeout_s),
            _ENV_RESTORE: repr(self.restore_interval_s),
            "TIDEGATE_CUSTOMS_LEASE_S": repr(self.lease_s),
            "TIDEGATE_TOS_LEASE_S": repr(self.lease_s),
            "TIDEGATE_SWEEP_INTERVAL_S": repr(self.orphan_sweep_s),
        }

    @property
    def worst_redelivery_s(self) -> float:
        """Longest a message of a killed main waits in ``unacked`` before it is requeued:
        the visibility timeout, plus the restore lock a main killed while restoring
        leaves behind (the preset's ``unacked_mutex_expire``), plus one restore interval."""
        return self.visibility_timeout_s + UNACKED_MUTEX_EXPIRE_S + self.restore_interval_s


# -- configuration -------------------------------------------------------------------


#: The vessel-burst knobs a chaos report lists in its ``config``, flat and in this order
#: (as it did when :class:`ChaosConfig` still copied them).
_REPORTED_BURST = (
    "interchanges",
    "customs_rate",
    "customs_burst",
    "tos_connections",
    "tos_service_s",
    "workers",
    "tos_workers",
    "seed",
    "max_wait_s",
    "timeout_s",
    "max_payload_bytes",
)
_VESSEL_FIELDS = frozenset(f.name for f in fields(VesselConfig))


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """One scenario run: the vessel burst, the fault and the workers' timing.

    The burst is the vessel scenario's own configuration, held whole: a chaos run has
    the same knobs with the same defaults, and a new vessel knob reaches chaos runs
    without a copy to keep in step.

    Args:
        kind: one of :data:`KINDS`.
        vessel: the burst, the downstreams and the fleet
            (:class:`~tidegate.harness.scenarios.vessel.VesselConfig`); its ``app`` is
            replaced by :data:`WORKER_APP` when the run starts (:attr:`vessel_run`).
        fault_at_s: when the fault starts, seconds after the burst is submitted.
        fault_s: how long it lasts (outage, slowness, Redis down; for
            ``kill-workers`` the longest kill window).
        kill_every_s: ``kill-workers``: seconds between two kills.
        main_kill_every: ``kill-workers``: every Nth kill hits a worker main process.
        kill_until: ``kill-workers``: stop killing once this share is delivered.
        slow_factor: ``slow-downstream``: the TOS latency multiplier.
        poison_per_kind: ``poison``: documents of each malformed kind (and oversized).
        outage_backlog: ``downstream-outage``: start the outage (not before
            ``fault_at_s``) once at most this many customs documents are left.
        aof_lost_s: ``host-crash``: the seconds of append-only file lost with the host.
        stragglers: ``slow-commit``: TOS requests that outlive their task.
        label: tells apart two runs of one kind in a report.
        timing: the workers' time limits (:class:`WorkerTiming`).
    """

    kind: Kind
    vessel: VesselConfig = field(default_factory=VesselConfig)
    fault_at_s: float = 5.0
    fault_s: float = 60.0
    kill_every_s: float = 3.0
    main_kill_every: int = 4
    kill_until: float = 0.95
    slow_factor: float = 20.0
    poison_per_kind: int = 5
    outage_backlog: int | None = None
    aof_lost_s: float = 1.0
    stragglers: int = 2
    label: str = ""
    timing: WorkerTiming = field(default_factory=WorkerTiming)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"unknown chaos kind {self.kind!r}; one of {KINDS}")
        if self.vessel.max_wait_s + 2.0 > self.timing.soft_time_limit_s:
            # A task waits in place up to max_wait_s, then calls the downstream.
            raise ConfigurationError("soft_time_limit_s must exceed max_wait_s + 2 s")

    @property
    def name(self) -> str:
        """The kind, and the label if any: ``downstream-outage (10 in flight)``."""
        return f"{self.kind} ({self.label})" if self.label else self.kind

    @property
    def vessel_run(self) -> VesselConfig:
        """The vessel run this is: :attr:`vessel` on the chaos workers' app, whose time
        limits come from :attr:`timing` rather than the vessel app's own."""
        return replace(self.vessel, app=WORKER_APP)

    def tuned(self, **changes: Any) -> ChaosConfig:
        """This run with ``changes``, each applied to the configuration that owns its
        name: the burst's (``interchanges``, ``customs_rate``…) or the fault's
        (``fault_s``…). The presets and the CLI's flags both go through here.

        Raises:
            ConfigurationError: a name neither configuration has.
        """
        own = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - own - _VESSEL_FIELDS)
        if unknown:
            raise ConfigurationError(f"no chaos or vessel setting named {', '.join(unknown)}")
        burst = {k: v for k, v in changes.items() if k in _VESSEL_FIELDS}
        rest = {k: v for k, v in changes.items() if k not in _VESSEL_FIELDS}
        return replace(self, vessel=replace(self.vessel, **burst), **rest)

    def knobs(self) -> dict[str, Any]:
        """The run's settings as a report's ``config`` lists them: flat, the burst's
        first, the workers' timing as a mapping."""
        knobs: dict[str, Any] = {"kind": self.kind}
        knobs.update((name, getattr(self.vessel, name)) for name in _REPORTED_BURST)
        for f in fields(self):
            if f.name not in {"kind", "vessel", "timing"}:
                knobs[f.name] = getattr(self, f.name)
        knobs["timing"] = asdict(self.timing)
        return knobs


_TEST_TIMING = WorkerTiming(
    soft_time_limit_s=8.0,
    hard_time_limit_s=10.0,
    visibility_timeout_s=20.0,
    restore_interval_s=1.0,
    lease_s=3.0,
)


def preset(kind: str, size: Literal["full", "test"] = "full") -> ChaosConfig:
    """The benchmark's (``full``) or the test suite's (``test``, trimmed) run of ``kind``.

    Full sizes fit the whole benchmark in about a quarter of an hour on 2 cores;
    ``kill-workers`` is the 10,000-interchange burst of the issue.
    """
    if kind not in KINDS:
        raise ConfigurationError(f"unknown chaos kind {kind!r}; one of {KINDS}")
    if size == "test":
        base = ChaosConfig(
            kind,
            vessel=VesselConfig(
                interchanges=300,
                customs_rate=10.0,
                customs_burst=3,
                max_wait_s=3.0,
                timeout_s=150.0,
            ),
            timing=_TEST_TIMING,
            fault_at_s=2.0,
            fault_s=10.0,
        )
        shapes: dict[str, dict[str, Any]] = {
            "kill-workers": {
                "fault_at_s": 1.0,
                "fault_s": 20.0,
                "tos_service_s": 0.15,
                "kill_every_s": 1.0,
                "main_kill_every": 3,
                "kill_until": 0.85,
            },
            "redis-restart": {"fault_at_s": 3.0, "fault_s": 4.0, "tos_service_s": 0.15},
            "host-crash": {"fault_at_s": 3.0, "fault_s": 4.0, "tos_service_s": 0.15},
            "downstream-outage": {"customs_rate": 5.0},
            "slow-downstream": {"fault_at_s": 1.0, "fault_s": 8.0, "tos_workers": 6},
            "slow-commit": {"fault_at_s": 1.0, "tos_service_s": 0.15},
            "poison": {"interchanges": 200, "poison_per_kind": 2},
            "broker-restart": {"fault_at_s": 3.0, "fault_s": 4.0, "tos_service_s": 0.15},
            "redis-oom": {"fault_at_s": 2.0, "fault_s": 8.0, "tos_service_s": 0.15},
        }
    else:
        # The benchmark's gateway is faster than the vessel demo's (10/s, burst 3).
        base = ChaosConfig(kind, vessel=VesselConfig(customs_rate=20.0, customs_burst=4))
        shapes = {
            "kill-workers": {
                "interchanges": 10_000,
                "customs_rate": 50.0,
                "customs_burst": 5,
                "fault_at_s": 3.0,
                "fault_s": 240.0,
            },
            "redis-restart": {"interchanges": 3000, "fault_at_s": 20.0, "fault_s": 10.0},
            "host-crash": {"interchanges": 3000, "fault_at_s": 20.0, "fault_s": 10.0},
            # The outage starts with 150 of the ~600 customs documents left: a parked
            # document queues behind the others again (FIFO, at the gate's rate), which
            # spaces its attempts out beyond its own backoff. ``tail`` (below) starts it
            # with 10 left, where each retries on its own backoff clock.
            "downstream-outage": {
                "interchanges": 2000,
                "customs_rate": 10.0,
                "customs_burst": 3,
                "fault_at_s": 10.0,
                "outage_backlog": 150,
                "label": "150 in flight",
            },
            "slow-downstream": {"interchanges": 3000, "tos_workers": 6},
            "slow-commit": {"interchanges": 3000, "fault_at_s": 10.0, "stragglers": 8},
            "poison": {"interchanges": 2000},
            # RabbitMQ (a private node) SIGKILLed 20 s in, down 10 s, booted again.
            "broker-restart": {"interchanges": 3000, "fault_at_s": 20.0, "fault_s": 10.0},
            # The incident: memory full for 25 s while the burst drains.
            "redis-oom": {"interchanges": 3000, "fault_at_s": 10.0, "fault_s": 25.0},
        }
    return base.tuned(**shapes[kind])


def benchmark_runs(
    kinds: Sequence[str] = KINDS, size: Literal["full", "test"] = "full"
) -> list[ChaosConfig]:
    """The runs of ``bench/chaos.py``: each kind's preset; at full size the outage also
    once with only 10 customs documents in flight (each on its own backoff clock)."""
    runs = []
    for kind in kinds:
        config = preset(kind, size)
        runs.append(config)
        if kind == "downstream-outage" and size == "full":
            runs.append(replace(config, outage_backlog=10, label="10 in flight"))
    return runs
