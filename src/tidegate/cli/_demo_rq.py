"""``tidegate demo --engine rq``: the vessel burst through RQ workers, same report.

Kept apart from :mod:`tidegate.cli.demo` so that the Celery runs never import RQ.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from tidegate.cli._common import TidegateCLIError
from tidegate.redis_server import redis_url

__all__ = ["rq_vessel_scenario"]


def rq_vessel_scenario(
    console: Console,
    tuning: Mapping[str, Any],
    chaos_kind: str | None,
    json_path: Path | None,
    plot_path: Path | None,
    keep_logs: bool,
) -> None:
    """Run the burst (``chaos_kind``: only ``kill-workers``); a failed chaos check exits 1."""
    from tidegate.cli._demo_runs import finish, live_table, log_dir_for
    from tidegate.harness.scenarios.rq_vessel import RqKillWorkers, run_rq_vessel_demo
    from tidegate.harness.scenarios.vessel import VesselConfig

    config = VesselConfig(**tuning)
    kill = RqKillWorkers(seed=config.seed) if chaos_kind == "kill-workers" else None
    limits = {
        "customs": f"{config.customs_rate:g}/s",
        "tos": f"{config.tos_connections} connections",
    }
    what = "" if kill is None else " Workers are SIGKILLed mid-burst (kill-workers)."
    console.print(
        f"[bold]A vessel berths (RQ):[/] {config.interchanges} interchanges hit "
        f"{config.workers} customs and {config.workers * 2} TOS RQ workers. The customs "
        f"gateway accepts {config.customs_rate:g}/s (burst {config.customs_burst}); the "
        f"terminal system {config.tos_connections} connections.{what}"
    )
    name = "demo-rq" if kill is None else "chaos-rq-kill-workers"
    with (
        log_dir_for(console, keep_logs, name) as log_dir,
        redis_url() as url,
        Live(console=console, refresh_per_second=4) as live,
    ):
        report, samples = run_rq_vessel_demo(
            url,
            config,
            log_dir=log_dir,
            kill=kill,
            on_sample=lambda s, n: live.update(live_table(s, n, limits)),
        )
    finish(console, report, json_path, plot_path=plot_path, samples=samples)
    if kill is not None:
        failed = [c["name"] for c in report["chaos"]["checks"] if not c["ok"]]
        if failed:
            raise TidegateCLIError(
                f"chaos kill-workers (rq): {len(failed)} check(s) failed: {', '.join(failed)}"
            )
