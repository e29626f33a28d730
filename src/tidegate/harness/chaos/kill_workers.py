"""The ``kill-workers`` scenario: SIGKILL worker processes every few seconds.

Pool children (Celery replaces them; ``reject_on_worker_lost`` requeues their message at
once) and, every Nth kill, a worker *main* process, which the harness restarts. A main's
prefetched message sits in kombu's ``unacked`` hash until the visibility timeout; per
killed main, one message is also taken from the broker the way kombu's Redis transport
can lose it, and the orphan sweep must give it back when it was its unit's only message
(:mod:`tidegate.harness.chaos.steals`). Keys accepted twice must lie in a kill window.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, cast

from tidegate.downstream.relay import DEFAULT_IDLE_S
from tidegate.harness.chaos.scenario import _leases, _Scenario
from tidegate.harness.chaos.steals import TakenMessage, classify, swept_back
from tidegate.harness.chaos.verdict import Check, _check, _events, _explain_duplicates, _reconciled
from tidegate.logging import get_logger, key_hash

if TYPE_CHECKING:
    from pathlib import Path

    from tidegate.harness.chaos.config import ChaosConfig
    from tidegate.harness.scenarios.vessel import RunHandles

log = get_logger("tidegate.ops")


class _KillWorkers(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.rng = random.Random(config.vessel.seed)
        self.kills: list[dict[str, Any]] = []
        self.restarts: list[dict[str, Any]] = []
        self.mains_killed: set[str] = set()
        self.next_kill = config.fault_at_s
        self.stopped_at: float | None = None
        self.expected = 0
        self.stolen: list[TakenMessage] = []

    def started(self, run: RunHandles) -> None:
        self.expected = len(run.submissions) - len(run.refused)

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        for name in list(run.fleet.procs):
            if not run.fleet.alive(name):
                # Either we killed its main, or a pool child was killed while the worker
                # was still starting: Celery then gives up ("Could not start worker
                # processes") and the main exits. A supervisor restarts it either way.
                cause = "main_killed" if name in self.mains_killed else "died_starting"
                self.mains_killed.discard(name)
                run.fleet.restart(name)
                self.restarts.append({"t": round(t, 2), "pool": name, "cause": cause})
                self.timeline.append(
                    {"t": round(t, 2), "event": "worker_restarted", "pool": name, "cause": cause}
                )
        if self.stopped_at is not None or t < self.next_kill:
            return
        delivered = (
            run.customs.stats(timeline=False)["distinct_keys"]
            + run.tos.stats(timeline=False)["distinct_keys"]
        )
        cfg = self.config
        if delivered >= cfg.kill_until * self.expected or t > cfg.fault_at_s + cfg.fault_s:
            self.stopped_at = t
            self.timeline.append({"t": round(t, 2), "event": "kills_stopped"})
            return
        self._kill_one(run, t)
        self.next_kill = t + cfg.kill_every_s

    def _kill_one(self, run: RunHandles, t: float) -> None:
        number = len(self.kills) + 1
        mains = run.fleet.main_pids()
        if number % self.config.main_kill_every == 0 and mains:
            pools = sorted(mains)
            pool = pools[(number // self.config.main_kill_every - 1) % len(pools)]
            pid, role = mains[pool], "main"
        else:
            children = [(name, pid) for name in mains for pid in run.fleet.child_pids(name)]
            if not children:
                return
            pool, pid = self.rng.choice(children)
            role = "child"
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if role == "main":
            self.mains_killed.add(pool)
            self._steal_one(run, pool, t)
        kill = {"t": round(t, 2), "wall": time.time(), "pool": pool, "pid": pid, "role": role}
        self.kills.append(kill)
        self.timeline.append({"t": kill["t"], "event": "sigkill", "pool": pool, "role": role})
        log.warning("chaos_worker_killed", pool=pool, pid=pid, role=role)

    def _steal_one(self, run: RunHandles, pool: str, t: float) -> None:
        """Make the kill the worst case kombu allows: the main had just BRPOPed a
        message and had not written it to ``unacked`` yet. That message is gone from
        the broker; only tidegate's orphan sweep can give it back."""
        raw = cast("bytes | None", run.client.rpop(f"edi.{pool}"))
        if raw is None:
            return
        # What the message was when taken: the only carrier of its unit (the sweep owes
        # it back) or a stale copy (see tidegate.harness.chaos.steals).
        taken = classify(run.client, run.prefix, raw, pool=pool, t=round(t, 2))
        self.stolen.append(taken)
        self.timeline.append(
            {"t": taken.t, "event": "message_lost_with_main", "pool": pool, "state": taken.state}
        )

    def busy(self, t: float) -> bool:
        return self.stopped_at is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        # A holder killed just before the run settled still has its lease: give the
        # leases the time to expire (a real condition, polled), then look.
        last_kill = max((k["wall"] for k in self.kills), default=0.0)
        deadline = last_kill + self.config.timing.lease_s + 1.0
        if self.config.vessel.tos_relay_depth:
            # A relay lane gives its lease back once it had nothing to send for its idle
            # time; the lanes of the killed processes expire like any holder's.
            deadline = max(deadline, time.time() + DEFAULT_IDLE_S + 1.0)
        while _leases(run.client, run.prefix, "tos")[0] and time.time() < deadline:
            time.sleep(0.1)
        data = super().collect(run)
        reclaimed = _events(self.log_dir, {"gate_lease_reclaimed"})
        swept = _events(self.log_dir, {"orphan_republished"})
        accepted = [*run.customs.accepted_keys(), *run.tos.accepted_keys()]
        back = swept_back(self.stolen, swept, (key_hash(key) for key in accepted))
        data.update(
            reconciled=_reconciled(self.log_dir),
            messages_lost_with_mains=len(self.stolen),
            messages_taken=[m.as_dict() for m in self.stolen],
            lost_messages_owed=back.owed,
            taken_not_owed=back.not_owed,
            orphans_republished=len(swept),
            orphans_republished_untaken=back.other_republished,
            lost_messages_swept_back=back.swept_back,
            lost_messages_delivered_by_a_copy=back.delivered_by_a_copy,
            kills=self.kills,
            kills_by_role=dict(Counter(k["role"] for k in self.kills)),
            restarts=len(self.restarts),
            restarts_by_cause=dict(Counter(r["cause"] for r in self.restarts)),
            gate_leases_reclaimed=sum(int(e.get("leases", 1)) for e in reclaimed),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        timing = self.config.timing
        roles = chaos["kills_by_role"]
        # A call takes the TOS's service time; a second covers the answer and the mark.
        window_s = self.config.vessel.tos_service_s + 1.0
        windows = [(k["pool"], k["wall"] - window_s, k["wall"]) for k in chaos["kills"]]
        explained, unexplained = _explain_duplicates(chaos, windows)
        chaos["duplicates_explained"] = explained
        chaos["unexplained_duplicates"] = [
            _nearest_kill(key, chaos, report["_timelines"]["t0"]) for key in unexplained
        ]
        return [
            *super().checks(report),
            _check(
                "children_and_mains_killed",
                roles.get("child", 0) >= 1 and roles.get("main", 0) >= 1,
                roles,
                ">= 1 each",
            ),
            _check(
                "killed_mains_restarted",
                chaos["restarts_by_cause"].get("main_killed", 0) == roles.get("main", 0),
                chaos["restarts_by_cause"],
                {"main_killed": roles.get("main", 0)},
            ),
            _check(
                "no_lease_leaked",
                chaos["tos_leases_live_at_end"] == 0,
                chaos["tos_leases_live_at_end"],
                0,
                f"live TOS leases after the run; {chaos['tos_leases_expired_at_end']} expired "
                f"ones (killed holders, lease {timing.lease_s:g} s) await reclaiming, "
                f"{chaos['gate_leases_reclaimed']} were reclaimed during the run",
            ),
            _check(
                "tos_cap_held",
                chaos["tos_max_concurrent_seen"] <= self.config.vessel.tos_connections,
                chaos["tos_max_concurrent_seen"],
                self.config.vessel.tos_connections,
            ),
            _check(
                "redelivery_within_visibility",
                chaos["max_unacked_age_s"] <= timing.worst_redelivery_s + 3.0,
                chaos["max_unacked_age_s"],
                timing.worst_redelivery_s + 3.0,
                "oldest unacknowledged message seen (s): a killed main's message waits "
                "the visibility timeout, then the next sweep requeues it",
            ),
            _check(
                "lost_messages_swept_back",
                chaos["lost_messages_swept_back"] >= 1
                and chaos["lost_messages_swept_back"] + chaos["lost_messages_delivered_by_a_copy"]
                == chaos["lost_messages_owed"],
                chaos["lost_messages_swept_back"],
                chaos["lost_messages_owed"],
                "units whose only message was taken off the broker with a killed main (as "
                "between kombu's BRPOP and its unacked write) that the orphan sweep "
                "republished, matched by unit, plus "
                f"{chaos['lost_messages_delivered_by_a_copy']} delivered by a copy a live "
                "worker still held when the take looked; "
                f"{chaos['messages_lost_with_mains']} messages "
                f"taken, not owed by the sweep: {chaos['taken_not_owed'] or 'none'} (stale "
                f"copies); {chaos['orphans_republished']} republished in all, "
                f"{chaos['orphans_republished_untaken']} of units not taken",
            ),
            _check(
                "duplicates_only_from_kills",
                not unexplained,
                len(unexplained),
                0,
                "keys accepted twice whose first acceptance was not just before a kill "
                "of a process of that downstream's pool",
            ),
        ]


def _nearest_kill(key: str, chaos: dict[str, Any], t0: float) -> dict[str, Any]:
    """A duplicate no kill window explains: its acceptances and the kills around them."""
    first = chaos["_accepts"][key][0]
    kills = sorted(chaos["kills"], key=lambda k: abs(k["wall"] - first))[:3]
    return {
        "key": key,
        "queue": chaos["_duplicate_queues"].get(key),
        "accepts_s": [round(at - t0, 3) for at in chaos["_accepts"][key]],
        "nearest_kills": [
            {
                "pool": k["pool"],
                "role": k["role"],
                "after_first_accept_s": round(k["wall"] - first, 3),
            }
            for k in kills
        ],
    }
