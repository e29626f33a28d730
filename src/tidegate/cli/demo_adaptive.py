"""``tidegate demo --scenario adaptive``: the run and its end, on the demo's own pieces
(:mod:`tidegate.cli.demo` dispatches here, so that module does not grow)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from tidegate.cli._demo_runs import events_to_log_file, finish, live_table, log_dir_for
from tidegate.redis_server import redis_url

__all__ = ["adaptive_scenario"]


def adaptive_scenario(
    console: Console,
    tuning: Mapping[str, Any],
    json_path: Path | None,
    plot_path: Path | None,
    keep_logs: bool,
) -> None:
    """Run the scenario with the flags given (``tuning``) over its defaults; the plot
    is the adaptive one (admitted rate against the true capacity)."""
    from tidegate.harness.scenarios.adaptive import AdaptiveDemoConfig, run_adaptive_demo

    config = dataclasses.replace(AdaptiveDemoConfig(), **tuning)
    low = config.customs_rate * config.dip_factor
    limits = {"customs": "hidden", "tos": "4 connections"}
    console.print(
        f"[bold]Adaptive gate:[/] {config.interchanges} interchanges; the customs gateway "
        f"really accepts {config.customs_rate:g}/s (burst {config.customs_burst}), "
        f"{low:g}/s from t = {config.dip_at_s:g} s for {config.dip_s:g} s. The gate starts "
        f"at {config.floor_rate:g}/s and is told none of it."
    )
    with contextlib.ExitStack() as stack:
        log_dir = stack.enter_context(log_dir_for(console, keep_logs, "adaptive"))
        # The sims run in this process: their events (the capacity steps, suspensions).
        events_to_log_file(stack, log_dir, "sims.log")
        url = stack.enter_context(redis_url())
        live = stack.enter_context(Live(console=console, refresh_per_second=4))
        report, _ = run_adaptive_demo(
            url,
            config,
            log_dir=log_dir,
            on_sample=lambda s, n: live.update(live_table(s, n, limits)),
        )
    finish(console, report, json_path)
    if plot_path is not None:
        from tidegate.harness.adaptive_plot import plot_adaptive

        console.print(f"plot: {plot_adaptive(report, plot_path)}")
