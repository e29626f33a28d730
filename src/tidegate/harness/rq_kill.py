"""What the RQ ``kill-workers`` chaos kills, and the checks its report ends with.

Kept out of :mod:`tidegate.harness.scenarios.rq_vessel` (the run itself). A *whole* worker is
what a lost host or a container's OOM kill takes: the worker's main process group
*and* its work horse — RQ puts a horse in a process group of its own, so killing
the main's group alone would leave the horse running its job to the end, which is
not a dead worker. With an in-process worker every kill is a whole-worker kill.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections.abc import Mapping
from typing import Any

from tidegate.harness.rq_fleet import RqFleet

__all__ = ["chaos_checks", "check", "kill_one"]


def kill_one(
    fleet: RqFleet, rng: random.Random, number: int, *, main_kill_every: int, forks: bool
) -> tuple[str, int, str] | None:
    """SIGKILL the ``number``-th victim; return (worker, pid, role) or ``None`` if none.

    Forking workers: every ``main_kill_every``-th kill takes a whole worker (in turn),
    the others one work horse (at random). In-process workers: a whole worker, at
    random.
    """
    mains = fleet.main_pids()
    if not mains:
        return None
    if not forks or number % main_kill_every == 0:
        if forks:
            worker = sorted(mains)[(number // main_kill_every - 1) % len(mains)]
        else:
            worker = rng.choice(sorted(mains))
        pid, horses = mains[worker], fleet.horse_pids(worker)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        for horse in horses:
            with contextlib.suppress(ProcessLookupError):
                os.kill(horse, signal.SIGKILL)
        return worker, pid, "worker"
    choices = [(name, horse) for name in mains for horse in fleet.horse_pids(name)]
    if not choices:
        return None
    worker, pid = rng.choice(choices)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return worker, pid, "work_horse"


def check(name: str, ok: bool, observed: Any, bound: Any, note: str = "") -> dict[str, Any]:
    return {"name": name, "ok": ok, "observed": observed, "bound": bound, "note": note}


def chaos_checks(
    roles: Mapping[str, int], report: Mapping[str, Any], *, forks: bool
) -> list[dict[str, Any]]:
    """The run's pass/fail lines: the right processes died, nothing lost, pending or
    accepted twice (all counted per key by the one reconciliation)."""
    if forks:
        killed = check(
            "horses_and_workers_killed",
            roles.get("work_horse", 0) >= 1 and roles.get("worker", 0) >= 1,
            dict(roles),
            ">= 1 each",
        )
    else:
        killed = check(
            "workers_killed", roles.get("worker", 0) >= 1, dict(roles), ">= 1 (jobs in-process)"
        )
    return [
        killed,
        check("nothing_lost", report["lost"] == 0, report["lost"], 0),
        check("nothing_pending", report["pending"] == 0, report["pending"], 0),
        check("accepted_once", report["accepted_twice"] == 0, report["accepted_twice"], 0),
    ]
