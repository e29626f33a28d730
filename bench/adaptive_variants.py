"""Four ways to send a burst to a customs gateway whose capacity nobody was told.

One run, the same burst, the same capacity schedule, side by side; every variant is
``--workers`` worker **processes** (the W-processes-probe-W-times effect needs separate
processes) taking units from one Redis list and POSTing them to a fresh ``CustomsSim``:
10/s with a burst of 2, 4/s for a maintenance window, 10/s again; 5 429s within 10 s
suspend the sender for 30 s. A 429 is sent again after its ``Retry-After``.

(a) ``fixed_quota`` — the fleet gate fixed at the printed quota (600/min = 10/s);
(b) ``fixed_floor`` — the fleet gate fixed at a safe floor (3/s, under the dip);
(c) ``aimd_per_process`` — no fleet gate: each process runs its own AIMD limiter
    (+0.25/s per second of success, ×0.5 and a local wait on a 429);
(d) ``tidegate_adaptive`` — the fleet gate driven by tidegate's controller: every
    process reports its calls (``AdaptiveReporter``) and runs ``AdaptiveLoop``; one
    holds the lease.

Reported per variant: accepted, 429s and their share of accepted calls, suspensions,
utilisation of the true capacity while draining, in fixed settled windows (15 s after
each change to the next) and once converged (from reaching 90 % to the next change), seconds
to 90 % of the capacity after the start and after the capacity came back, 429s in the
10 s after the drop, drain time against the ideal (the schedule's own drain time).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
import uuid
from typing import Any

import httpx

from _harness import pct
from tidegate._redis import client_from_url
from tidegate.downstream import classify_response, parse_rate_limit_headers
from tidegate.errors import Throttled
from tidegate.flow import Gate
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptiveLoop,
    AdaptivePolicy,
    AdaptiveReporter,
    RatePolicy,
    RedisAdaptiveStore,
)
from tidegate.settings import GatePolicy
from tidegate.sim import CustomsSim

SPREAD = (("p50", 0.5), ("p90", 0.9), ("max", 1.0))
VARIANTS = ("fixed_quota", "fixed_floor", "aimd_per_process", "tidegate_adaptive")
BASE, DIP, DIP_AT_S, DIP_S = 10.0, 4.0, 40.0, 20.0
FIXED = {"fixed_quota": 10.0, "fixed_floor": 3.0}


def capacity(t: float) -> float:
    return DIP if DIP_AT_S <= t < DIP_AT_S + DIP_S else BASE


def ideal_drain_s(units: int) -> float:
    """Seconds the schedule itself needs to accept ``units`` calls from t = 0."""
    done, t = 0.0, 0.0
    while done < units:
        done += capacity(t) * 0.01
        t += 0.01
    return t


class LocalAimd:
    """One process's own limiter: additive increase per second of success, halve on 429."""

    def __init__(self, start: float = 1.0, step_per_s: float = 0.25, top: float = 50.0) -> None:
        self.rate, self.step, self.top = start, step_per_s, top
        self.next_at = time.monotonic()
        self.changed_at = time.monotonic()

    def wait(self) -> None:
        now = time.monotonic()
        if self.next_at > now:
            time.sleep(self.next_at - now)
        self.next_at = max(self.next_at, time.monotonic()) + 1.0 / self.rate

    def ok(self) -> None:
        now = time.monotonic()
        self.rate = min(self.top, self.rate + self.step * (now - self.changed_at))
        self.changed_at = now

    def throttled(self, retry_after_s: float) -> None:
        self.rate = max(0.1, self.rate / 2.0)
        self.changed_at = time.monotonic()
        self.next_at = time.monotonic() + retry_after_s


def worker(variant: str, url: str, prefix: str, endpoint: str, max_s: float) -> None:
    """One worker process: take units until the list is empty (or ``max_s`` has passed
    since the start: a variant that keeps getting suspended is cut off, its units left
    undelivered and counted), send each until accepted."""
    client = client_from_url(url)
    units, out = f"{prefix}:bench:units", f"{prefix}:bench:out"
    gate = local = loop = reporter = None
    admitted_ms: float | None = None
    held = False
    if variant == "aimd_per_process":
        local = LocalAimd()
    else:
        gate = Gate(client, "customs", policy=GatePolicy(rate=1.0), prefix=prefix)
    if variant == "tidegate_adaptive":
        assert gate is not None
        policy = AdaptivePolicy(rate=RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True))
        controller = AdaptiveController(
            RedisAdaptiveStore(client), "customs", policy, prefix=prefix
        )
        loop, reporter = AdaptiveLoop(controller, gate), AdaptiveReporter(controller)
    client.rpush(f"{prefix}:bench:ready", "1")
    client.blpop([f"{prefix}:bench:go"], timeout=300)  # every process starts at once
    stop_at = time.monotonic() + max_s
    if loop is not None:
        loop.start()
    with httpx.Client(timeout=30.0) as http:
        while time.monotonic() < stop_at and (unit := client.lpop(units)) is not None:
            key = unit.decode() if isinstance(unit, bytes) else str(unit)
            while time.monotonic() < stop_at:
                if local is not None:
                    local.wait()
                else:
                    assert gate is not None
                    try:
                        permit = gate.acquire(max_wait=60.0)
                    except Throttled:
                        continue
                    permit.release()
                    admitted_ms, held = permit.admitted_ms, permit.waited_s > 0
                started = time.monotonic()
                answer = http.post(endpoint, json={"n": key}, headers={"Idempotency-Key": key})
                latency_ms = (time.monotonic() - started) * 1000.0
                outcome = classify_response(
                    "customs", answer.status_code, answer.headers, now=time.time()
                )
                if reporter is not None:
                    kind = outcome.kind if outcome.kind in ("ok", "throttled") else "unavailable"
                    hint = parse_rate_limit_headers(answer.headers, now=time.time())
                    reporter.observe(
                        kind,
                        latency_ms=latency_ms,
                        hint=hint,
                        admitted_ms=admitted_ms,
                        held=held,
                    )
                answered_at = time.time()
                if outcome.kind == "ok":
                    client.rpush(out, json.dumps([answered_at, answer.status_code]))
                    if local is not None:
                        local.ok()
                    break
                # As DownstreamClient does: the fleet's pause is written as soon as the
                # 429 is read. How long after the call went out it is in force (an upper
                # bound on the model's ``pause_s``: the call reached the customs after
                # ``started``) is recorded with the answer.
                retry_after = outcome.retry_after_s or 1.0
                if local is not None:
                    local.throttled(retry_after)
                elif gate is not None:
                    gate.pause(retry_after, "http_429")
                paused_ms = (time.monotonic() - started) * 1000.0
                client.rpush(out, json.dumps([answered_at, answer.status_code, paused_ms]))
    if loop is not None:
        loop.stop()
    client.close()


def _window_util(accepted: list[float], lo: float, hi: float) -> float:
    """Accepted calls in ``[lo, hi)`` against what the capacity allowed there."""
    area = sum(capacity(lo + i * 0.01) * 0.01 for i in range(int((hi - lo) * 100)))
    return round(sum(1 for a in accepted if lo <= a < hi) / area, 3)


def _converged_util(
    accepted: list[float], windows: list[tuple[float | None, float]]
) -> list[float | None]:
    """Utilisation *once converged* (the issue's goal): in each phase of the schedule,
    from the moment the 3-s rolling rate first reached 90 % of the capacity to the
    phase's end; ``None`` for a phase that never got there or left under 5 s. The
    fixed windows of ``utilisation_settled`` include the search when it is slow."""
    return [
        None if lo is None or hi - lo < 5.0 else _window_util(accepted, lo, hi)
        for lo, hi in windows
    ]


def _reach_s(accepted: list[float], start: float, end: float) -> float | None:
    """Seconds after ``start`` until a 3-s rolling accepted rate reaches 90 % of capacity."""
    t = start
    while t + 3.0 <= end:
        count = sum(1 for a in accepted if t <= a < t + 3.0)
        if count / 3.0 >= 0.9 * capacity(t + 1.5):
            return round(t + 3.0 - start, 1)
        t += 0.5
    return None


def _spread(values: list[float]) -> dict[str, float] | None:
    """p50, p90 and the largest of ``values`` (``None`` when there are none)."""
    if not values:
        return None
    spread = {name: pct(values, q) for name, q in SPREAD}
    return {name: round(value, 2) for name, value in spread.items() if value is not None}


def run_variant(
    variant: str, url: str, *, units: int, workers: int, headers: str, max_s: float | None = None
) -> dict[str, Any]:
    """One variant's run; cut off after ``max_s`` (default: 150 s, or twice the ideal
    drain for a burst that needs more than 75 s)."""
    if max_s is None:
        max_s = max(150.0, 2.0 * ideal_drain_s(units))
    client = client_from_url(url)
    prefix = f"bench-variants-{uuid.uuid4().hex[:8]}"
    client.rpush(f"{prefix}:bench:units", *[f"{variant}-{i}" for i in range(units)])
    if variant in FIXED:
        Gate(client, "customs", policy=GatePolicy(rate=1.0), prefix=prefix).configure(
            rate=FIXED[variant]
        )
    sim = CustomsSim(
        BASE,
        2,
        schedule=[(DIP_AT_S, DIP), (DIP_AT_S + DIP_S, BASE)],
        suspend_after=5,
        suspend_window_s=10.0,
        suspend_s=30.0,
        quota_headers=headers,  # type: ignore[arg-type]
    )
    ctx = mp.get_context("spawn")
    with sim:
        procs = [
            ctx.Process(target=worker, args=(variant, url, prefix, sim.endpoint, max_s))
            for _ in range(workers)
        ]
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + 300
        while client.llen(f"{prefix}:bench:ready") < workers and time.monotonic() < deadline:
            time.sleep(0.05)  # the processes import tidegate and connect
        # The schedule runs from here: the sim's origin is reset as the workers start.
        sim.reset()
        t0 = time.time()
        client.rpush(f"{prefix}:bench:go", *["go"] * workers)
        for proc in procs:
            proc.join(timeout=600)
        stats = sim.stats(timeline=False)
    rows = [json.loads(raw) for raw in client.lrange(f"{prefix}:bench:out", 0, -1)]
    paused_ms = [row[2] for row in rows if len(row) > 2]
    history = _rate_history(client, prefix, t0) if variant == "tidegate_adaptive" else None
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    accepted = sorted(row[0] - t0 for row in rows if row[1] == 200)
    refused = sorted(row[0] - t0 for row in rows if row[1] == 429)
    undelivered = units - stats["distinct_keys"]
    drain = accepted[-1] if accepted else float("nan")
    cap_area = sum(capacity(i * 0.01) * 0.01 for i in range(int(drain * 100)))
    settled = [(15.0, DIP_AT_S), (DIP_AT_S + DIP_S + 15.0, drain)]
    settled_util = []
    for lo, hi in settled:
        if hi - lo >= 5:
            settled_util.append(_window_util(accepted, lo, hi))
    reach_start = _reach_s(accepted, 0.0, DIP_AT_S)
    reach_increase = _reach_s(accepted, DIP_AT_S + DIP_S, drain)
    return {
        "variant": variant,
        "accepted": len(accepted),
        "distinct_accepted": stats["distinct_keys"],
        "responses_429": len(refused),
        "share_429": round(len(refused) / max(1, len(accepted)), 4),
        "suspensions": stats["suspensions"],
        "utilisation": round(len(accepted) / cap_area, 3) if cap_area else None,
        "utilisation_settled": settled_util,
        "utilisation_converged": _converged_util(
            accepted,
            [
                (reach_start, DIP_AT_S),
                (None if reach_increase is None else DIP_AT_S + DIP_S + reach_increase, drain),
            ],
        ),
        "to_90pct_after_start_s": reach_start,
        "to_90pct_after_increase_s": reach_increase,
        "responses_429_10s_after_drop": sum(1 for r in refused if DIP_AT_S <= r < DIP_AT_S + 10),
        "pause_written_ms": _spread(paused_ms),
        "undelivered_at_cutoff": undelivered,
        "drain_s": round(drain, 1) if not undelivered else None,
        "ideal_s": round(ideal_drain_s(units), 1),
        "drain_over_ideal": round(drain / ideal_drain_s(units), 2) if not undelivered else None,
        **({} if history is None else {"rate_history": history}),
    }


def _rate_history(client: Any, prefix: str, t0: float) -> list[list[Any]]:
    """The controller's decisions as ``[t_s, reason, rate, ceiling]``, oldest first: the
    real run's counterpart of the model's ``decisions`` (where a cut landed, and why)."""
    policy = AdaptivePolicy(rate=RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True))
    reader = AdaptiveController(RedisAdaptiveStore(client), "customs", policy, prefix=prefix)
    out = []
    for event in reversed(reader.history(limit=1000)):
        if event.get("kind") != "rate" or "at_ms" not in event:
            continue
        at_s = round(float(event["at_ms"]) / 1000.0 - t0, 2)
        out.append([at_s, event.get("reason"), event.get("rate"), event.get("ceiling")])
    return out
