"""The run of a chaos scenario: the vessel burst with one fault, then its report.

:func:`run_chaos` starts the run's own embedded Redis (a chaos run kills things; it
never touches a shared server), picks the fault kind's scenario (RabbitMQ's through
:mod:`~tidegate.harness.chaos.amqp`), runs the vessel burst of
:func:`~tidegate.harness.scenarios.vessel.run_vessel_demo` with it, and adds the checks,
the drain delays and the fault's knobs to the report. :func:`summary_row` is the
benchmark table's row.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidegate.harness.chaos.amqp import amqp_chaos_run, amqp_scenario
from tidegate.harness.chaos.config import _RESTARTS, ChaosConfig
from tidegate.harness.chaos.downstream_outage import _DownstreamOutage
from tidegate.harness.chaos.kill_workers import _KillWorkers
from tidegate.harness.chaos.poison import _Poison
from tidegate.harness.chaos.redis_oom import RedisOom
from tidegate.harness.chaos.redis_restart import _RedisRestart
from tidegate.harness.chaos.slow_commit import _SlowCommit
from tidegate.harness.chaos.slow_downstream import _SlowDownstream
from tidegate.harness.scenarios.vessel import (
    TASK_FOR_QUEUE,
    RunHandles,
    Sample,
    Submission,
    run_vessel_demo,
)
from tidegate.redis_server import EmbeddedRedis

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tidegate.harness.chaos.scenario import _Scenario


def _scenario(config: ChaosConfig, log_dir: Path | None, server: EmbeddedRedis) -> _Scenario:
    if config.kind == "kill-workers":
        return _KillWorkers(config, log_dir)
    if config.kind in _RESTARTS:
        return _RedisRestart(config, log_dir, server)
    if config.kind == "downstream-outage":
        return _DownstreamOutage(config, log_dir)
    if config.kind == "slow-downstream":
        return _SlowDownstream(config, log_dir)
    if config.kind == "slow-commit":
        return _SlowCommit(config, log_dir)
    if config.kind == "redis-oom":
        return RedisOom(config, log_dir, server)
    return _Poison(config, log_dir)


class _FromSubmitted:
    """A scenario whose clock starts when the burst is submitted, as ``fault_at_s`` says.

    :func:`run_vessel_demo` counts ``t`` from the start of the submission and ticks only
    after it; on a loaded machine submitting 10,000 interchanges can outlast a whole
    fault window, and every fault would then strike the burst's tail. The first tick's
    ``t`` (the submission's length) is taken off every ``t`` the scenario sees.
    """

    def __init__(self, scenario: _Scenario) -> None:
        self.scenario = scenario
        self.offset_s: float | None = None

    def worker_env(self) -> Mapping[str, str]:
        return self.scenario.worker_env()

    def documents(self, burst: list[Submission]) -> list[Submission]:
        return self.scenario.documents(burst)

    def started(self, run: RunHandles) -> None:
        self.scenario.started(run)

    def tick(self, run: RunHandles, t: float) -> None:
        if self.offset_s is None:
            self.offset_s = t
        self.scenario.tick(run, t - self.offset_s)

    def busy(self, t: float) -> bool:
        return self.scenario.busy(t - (self.offset_s or 0.0))

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = self.scenario.collect(run)
        data["submit_s"] = round(self.offset_s or 0.0, 2)
        return data


def _drain_delays(report: dict[str, Any], config: ChaosConfig) -> dict[str, Any]:
    """Per downstream: when its last document settled, vs the ideal drain time."""
    chaos = report["chaos"]
    t0 = report["_timelines"]["t0"]
    capacity = {
        "customs": config.vessel.customs_rate,
        "tos": config.vessel.tos_connections / config.vessel.tos_service_s,
    }
    task_of = {"customs": TASK_FOR_QUEUE["edi.customs"], "tos": TASK_FOR_QUEUE["edi.tos"]}
    delays: dict[str, Any] = {}
    for name in ("customs", "tos"):
        accepted = report["_timelines"][name]
        failed = [d["last_failed_at"] for d in chaos["dead_letters"] if d["task"] == task_of[name]]
        settled_at = max([*accepted[-1:], *failed], default=t0) - t0
        ideal = report["downstreams"][name]["accepted"] / capacity[name]
        delays[name] = {
            "settled_s": round(settled_at, 2),
            "ideal_s": round(ideal, 2),
            "delay_s": round(max(0.0, settled_at - ideal), 2),
        }
    return delays


def run_chaos(
    config: ChaosConfig,
    *,
    broker_url: str | None = None,
    log_dir: Path | None = None,
    on_sample: Callable[[Sample, int], None] | None = None,
    interval_s: float = 0.5,
) -> tuple[dict[str, Any], list[Sample]]:
    """Run one scenario on its own embedded Redis; return (report, samples).

    ``report["chaos"]`` holds what the scenario observed and ``checks`` (a list of
    :class:`Check` as dicts), ``report["ok"]`` whether they all held. Keys starting
    with ``_`` are bulky raw data (timelines), left out of JSON output by callers.

    The scenario reads the workers' logs, so they are always written: to ``log_dir``
    when given (and kept, ``report["log_dir"]``), else to a temporary directory removed
    before this returns (``report["log_dir"]`` is then ``None``).

    With ``broker_url`` (``amqp://``), or for ``broker-restart``, RabbitMQ carries the
    messages (:mod:`tidegate.harness.chaos.amqp`).
    """
    with contextlib.ExitStack() as stack:
        kept = log_dir is not None
        if log_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix=f"tidegate-chaos-{config.kind}-")
            log_dir = Path(stack.enter_context(tmp))
        amqp = stack.enter_context(amqp_chaos_run(config, broker_url))
        server = EmbeddedRedis(appendonly=config.kind in _RESTARTS).start()
        try:
            scenario = (
                _scenario(config, log_dir, server)
                if amqp is None
                else amqp_scenario(config, log_dir, amqp)
            )
            report, samples = run_vessel_demo(
                server.url,
                config.vessel_run,
                log_dir=log_dir,
                on_sample=on_sample,
                interval_s=interval_s,
                disturbance=_FromSubmitted(scenario),
                broker=None if amqp is None else amqp.broker,
            )
        finally:
            server.stop()
    report["scenario"] = f"chaos:{config.kind}"
    report["log_dir"] = str(log_dir) if kept else None
    chaos = report["chaos"]
    chaos["name"] = config.name
    checks = scenario.checks(report)
    chaos["checks"] = [asdict(c) for c in checks]
    report["ok"] = all(c.ok for c in checks)
    chaos["drain"] = _drain_delays(report, config)
    report["config"] = {**report["config"], **config.knobs()}
    return report, samples


def summary_row(report: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark table's row for one scenario run."""
    chaos = report["chaos"]
    drain = chaos["drain"]
    worst = max(drain.values(), key=lambda d: d["delay_s"])
    failed = [c["name"] for c in chaos["checks"] if not c["ok"]]
    return {
        "scenario": chaos.get("name", chaos["kind"]),
        "submitted": report["submitted"],
        "delivered": report["delivered"],
        "dead_lettered": report["dead_lettered"],
        "refused_at_intake": report["refused_at_intake"],
        "pending": report["pending"],
        "lost": report["lost"],
        "duplicated": report["duplicates"],
        "downstream_429": sum(d["responses_429"] for d in report["downstreams"].values()),
        "worst_drain_delay_s": worst["delay_s"],
        "elapsed_s": report["elapsed_s"],
        "checks": "all held" if not failed else "FAILED: " + ", ".join(failed),
    }
