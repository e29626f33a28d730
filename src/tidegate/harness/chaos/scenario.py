"""What every fault kind shares: the disturbance hooks, the bookkeeping, the invariant.

:class:`_Scenario` is the :class:`~tidegate.harness.scenarios.vessel.Disturbance` each
kind derives from: it watches the age of the oldest message in kombu's ``unacked`` hash,
collects what the run left (DLQ, the downstreams' own records of accepted keys, the
per-key reconciliation, the TOS leases) and checks the invariant every kind must hold.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any, cast

import redis

from tidegate.harness.chaos.verdict import Check, _check, unplanned_dead_letters
from tidegate.harness.reconcile import reconcile
from tidegate.keys import Keyspace
from tidegate.load import DeadLetterQueue
from tidegate.sim import max_in_window

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from tidegate.harness.chaos.config import ChaosConfig
    from tidegate.harness.scenarios.vessel import RunHandles, Submission


def _oldest_unacked_age(client: redis.Redis) -> float:
    """Seconds the oldest message in kombu's ``unacked`` hash has been held."""
    oldest = cast(
        "list[tuple[bytes, float]]", client.zrange("unacked_index", 0, 0, withscores=True)
    )
    if not oldest:
        return 0.0
    return max(0.0, time.time() - float(oldest[0][1]))


class _Scenario:
    """The common part: invariants, bookkeeping, the ``unacked`` age watch."""

    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        self.config = config
        self.log_dir = log_dir
        self.max_unacked_age_s = 0.0
        self.timeline: list[dict[str, Any]] = []

    # Disturbance hooks ---------------------------------------------------------------

    def worker_env(self) -> Mapping[str, str]:
        return {**self.config.timing.env(), "TIDEGATE_LOG_LEVEL": "INFO"}

    def documents(self, burst: list[Submission]) -> list[Submission]:
        return burst

    def started(self, run: RunHandles) -> None:
        pass

    def tick(self, run: RunHandles, t: float) -> None:
        try:
            age = _oldest_unacked_age(run.client)
        except (redis.exceptions.RedisError, OSError):
            return  # Redis is away: nothing to watch
        self.max_unacked_age_s = max(self.max_unacked_age_s, age)

    def busy(self, t: float) -> bool:
        return t < self.config.fault_at_s + self.config.fault_s

    def collect(self, run: RunHandles) -> dict[str, Any]:
        dlq = DeadLetterQueue(run.client, prefix=run.prefix)
        letters = [letter.summary() for letter in dlq.iter()]
        c_stats, t_stats = run.customs.stats(), run.tos.stats()
        accepted = Counter(run.customs.accepted_keys()) + Counter(run.tos.accepted_keys())
        refused = {item.key for item in run.refused}
        dead = {letter["key"] for letter in letters}
        outcome = reconcile(
            (item.key for item in run.submissions),
            accepted=accepted,
            dead_lettered=dead,
            refused=refused,
        )
        lost = outcome.keys("lost")
        live, expired = _leases(run.client, run.prefix, "tos")
        duplicates = sorted(k for k, n in accepted.items() if n > 1)
        queue_of = {item.key: item.queue for item in run.submissions}
        accepts = _accepts(run)
        return {
            "kind": self.config.kind,
            "timeline": self.timeline,
            "max_unacked_age_s": round(self.max_unacked_age_s, 2),
            "dead_letters": letters,
            "unplanned_dead_letters": unplanned_dead_letters(letters, run.submissions),
            "duplicate_keys": duplicates,
            "_duplicate_queues": {k: queue_of.get(k, "") for k in duplicates},
            "unaccounted_keys": lost,
            "refused_keys": sorted(refused),
            "tos_leases_live_at_end": live,
            "tos_leases_expired_at_end": expired,
            "customs_max_requests_1s": max_in_window(
                [t for t, _ in c_stats["request_timeline"]], 1.0
            ),
            "tos_max_concurrent_seen": t_stats["max_concurrent_seen"],
            "_customs": c_stats,
            "_tos": t_stats,
            "_accepts": accepts,
            "duplicate_accepts_s": {
                k: [round(at - run.wall_t0, 3) for at in accepts[k]] for k in duplicates
            },
        }

    # verdict -------------------------------------------------------------------------

    def checks(self, report: dict[str, Any]) -> list[Check]:
        """The invariant, checked after every scenario (scenarios add their own)."""
        chaos = report["chaos"]
        accounted = (
            report["delivered"]
            + report["dead_lettered"]
            + report["quarantined"]
            + report["refused_at_intake"]
            + report["pending"]
        )
        return [
            _check(
                "accounted",
                accounted == report["submitted"] and report["lost"] == 0,
                f"{report['submitted']} = {report['delivered']} delivered + "
                f"{report['dead_lettered']} dead-lettered + {report['quarantined']} quarantined"
                f" + {report['refused_at_intake']} refused + {report['pending']} pending",
                note="submitted = delivered + dead_lettered + quarantined + refused + pending",
            ),
            _check("nothing_pending", report["pending"] == 0, report["pending"], 0),
            _check(
                "every_key_accounted",
                not chaos["unaccounted_keys"],
                len(chaos["unaccounted_keys"]),
                0,
                "keys neither accepted downstream, dead-lettered nor refused at intake "
                "(pending ones included)",
            ),
            _check(
                "one_call_per_key",
                report["duplicates"] == 0,
                report["duplicates"],
                0,
                "downstream acceptances beyond the first, per idempotency key",
            ),
            _check(
                "no_unplanned_dead_letter",
                not chaos["unplanned_dead_letters"],
                len(chaos["unplanned_dead_letters"]),
                0,
                "healthy documents in the DLQ (only the scenario's malformed ones may be)",
            ),
        ]


def _leases(client: redis.Redis, prefix: str, name: str) -> tuple[int, int]:
    """(live, expired) concurrency leases of gate ``name``, on the Redis clock.

    An expired lease (its holder was killed) stays in the set until the next admission
    reclaims it; it no longer counts against the cap.
    """
    key = Keyspace(prefix).limit(name).leases
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros / 1000
    live = int(client.zcount(key, f"({now_ms}", "+inf"))
    return live, int(client.zcard(key)) - live


def _accepts(run: RunHandles) -> dict[str, list[float]]:
    """Idempotency key → the instants (Unix s) it was accepted downstream."""
    accepts: dict[str, list[float]] = {}
    for sim in (run.customs, run.tos):
        keys = sim.accepted_keys()
        times = sim.stats()["accept_timeline"]
        # Both lists only grow, in the same order: if a call landed between the two
        # reads (a run that timed out), the shorter one still pairs up correctly.
        for key, at in zip(keys, times, strict=False):
            accepts.setdefault(key, []).append(at)
    return accepts
