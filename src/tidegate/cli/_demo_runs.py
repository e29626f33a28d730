"""The runs behind ``tidegate demo``: each scenario's console, live view and end.

:mod:`tidegate.cli.demo` is the command (its flags, and which run takes which); this
module starts what a run needs (a broker, an embedded Redis, a log folder, the live
table), hands it to the scenario in :mod:`tidegate.harness`, and prints the end. The
harness is imported inside each run, so the CLI starts without loading Celery.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tidegate.cli._common import TidegateCLIError
from tidegate.cli._output import print_table
from tidegate.logging import configure as configure_logging
from tidegate.redis_server import redis_url

__all__ = [
    "bulk_scenario",
    "chaos_scenario",
    "events_to_log_file",
    "finish",
    "gate_scenario",
    "live_table",
    "log_dir_for",
    "overload_scenario",
    "vessel_scenario",
]


@contextlib.contextmanager
def log_dir_for(console: Console, keep: bool, name: str) -> Iterator[Path]:
    """Where the run's workers log: kept (and shown) with ``--keep-logs``, else removed."""
    if keep:
        path = Path(tempfile.mkdtemp(prefix=f"tidegate-{name}-"))
        try:
            yield path
        finally:
            console.print(f"logs: {path}")
        return
    with tempfile.TemporaryDirectory(prefix=f"tidegate-{name}-") as tmp:
        yield Path(tmp)


def live_table(sample: Any, submitted: int, limits: Mapping[str, str]) -> Table:
    table = Table(title=f"vessel burst — t = {sample.t:5.1f} s", expand=False)
    table.add_column("queue → downstream")
    for column in ("waiting", "accepted", "limit"):
        table.add_column(column, justify="right")
    table.add_row(
        "edi.customs → customs gateway",
        str(sample.depth.get("edi.customs", 0)),
        str(sample.accepted["customs"]),
        limits["customs"],
    )
    table.add_row(
        "edi.tos → terminal system (TOS)",
        str(sample.depth.get("edi.tos", 0)),
        str(sample.accepted["tos"]),
        limits["tos"],
    )
    settled = sum(sample.accepted.values()) + sample.dead_lettered
    table.caption = (
        f"settled {settled}/{submitted} · parked {sample.parked} · dead-lettered "
        f"{sample.dead_lettered} · 429s {sample.responses_429} · 503s {sample.responses_503} "
        f"· workers {sample.rss_mb:.0f} MiB (largest process {sample.largest_process_mb:.0f})"
    )
    return table


def finish(
    console: Console,
    report: Mapping[str, Any],
    json_path: Path | None,
    *,
    plot_path: Path | None = None,
    samples: Any = None,
) -> None:
    """The end of every run: aligned tables, then the files written, each by its path."""
    from tidegate.harness.report_view import end_tables, public

    # Off a terminal, a live view's last frame ends without a line break.
    console.line()
    for table in end_tables(report):
        print_table(console, table)
    if plot_path is not None:
        from tidegate.harness.plot import plot_run

        console.print(f"plot: {plot_run(dict(report), samples, plot_path)}")
    if json_path is not None:
        json_path.write_text(json.dumps(public(report), indent=2) + "\n", encoding="utf-8")
        console.print(f"report: {json_path}")


def vessel_scenario(
    console: Console,
    interchanges: int,
    customs_rate: float,
    customs_burst: int,
    workers: int,
    seed: int,
    json_path: Path | None,
    plot_path: Path | None,
    keep_logs: bool,
    broker_url: str | None = None,
    *,
    console_on: bool = False,
    tos_relay_depth: int | None = None,
) -> None:
    from tidegate.harness.run_broker import run_broker_for
    from tidegate.harness.scenarios.vessel import VesselConfig, run_vessel_demo, tos_pool

    config = VesselConfig(
        interchanges=interchanges,
        customs_rate=customs_rate,
        customs_burst=customs_burst,
        workers=workers,
        seed=seed,
        tos_relay_depth=tos_relay_depth,
    )
    limits = {"customs": f"{customs_rate:g}/s", "tos": f"{config.tos_connections} connections"}
    console.print(
        f"[bold]A vessel berths:[/] {interchanges} interchanges hit {workers} customs and "
        f"{tos_pool(config).workers} TOS worker processes. The customs gateway accepts "
        f"{customs_rate:g}/s (burst {customs_burst}); the terminal system "
        f"{config.tos_connections} connections"
        + (
            f", each kept by a relay lane with {tos_relay_depth} requests on it."
            if tos_relay_depth
            else "."
        )
    )
    with contextlib.ExitStack() as stack:
        run_broker = stack.enter_context(run_broker_for(broker_url))
        log_dir = stack.enter_context(log_dir_for(console, keep_logs, "demo"))
        url = stack.enter_context(redis_url())
        watch = demo_console(console, stack, log_dir) if console_on else None
        live = stack.enter_context(Live(console=console, refresh_per_second=4))
        report, samples = run_vessel_demo(
            url,
            config,
            log_dir=log_dir,
            on_sample=lambda s, n: live.update(live_table(s, n, limits)),
            disturbance=watch,
            broker=run_broker,
        )
        report.pop("chaos", None)  # the console observes; it is no chaos scenario
    finish(console, report, json_path, plot_path=plot_path, samples=samples)


def events_to_log_file(stack: contextlib.ExitStack, log_dir: Path, name: str) -> None:
    """Send this process's JSON events (INFO and up) to ``name`` in the log folder until
    ``stack`` closes, then back to stderr at WARNING: a run whose parts log from this
    process (the monitor, the sims, the console) keeps them off the live view."""
    events = stack.enter_context((log_dir / name).open("a", encoding="utf-8"))
    configure_logging(level="INFO", stream=events)
    stack.callback(configure_logging, level="WARNING", stream=sys.stderr)


def demo_console(console: Console, stack: contextlib.ExitStack, log_dir: Path) -> Any:
    """The console on the run (:mod:`tidegate.harness.scenarios.console`): its URL and password
    are printed here, once; its audit events go to ``console.log`` in the log folder."""
    from tidegate.harness.scenarios.console import DEMO_USER, DemoConsole

    events_to_log_file(stack, log_dir, "console.log")
    watch = stack.enter_context(DemoConsole())
    console.print(
        f"[bold]console:[/] {watch.url} · user {DEMO_USER} · password {watch.password} "
        "(made for this run; the console closes when the run ends)",
        soft_wrap=True,
    )
    return watch


def bulk_table(sample: Any, submitted: int) -> Table:
    table = Table(title=f"manifest fan-out — t = {sample.t:5.1f} s")
    table.add_column("queue")
    table.add_column("waiting", justify="right")
    for queue in ("bulk.dispatch", "bl.parse", "edi.tos"):
        table.add_row(queue, str(sample.depth.get(queue, 0)))
    table.caption = (
        f"terminal system has {sample.accepted['tos']}/{submitted} B/Ls · dead-lettered "
        f"{sample.dead_lettered} · workers {sample.rss_mb:.0f} MiB"
    )
    return table


def bulk_scenario(
    console: Console,
    bls: int,
    workers: int,
    seed: int,
    json_path: Path | None,
    keep_logs: bool,
) -> None:
    from tidegate.harness.scenarios.bulk import BulkConfig, run_bulk_demo

    config = BulkConfig(bls=bls, workers=workers, seed=seed)
    console.print(
        f"[bold]A consolidated manifest arrives:[/] {bls} consignments; 1 % name a consignee "
        "the terminal system does not know yet. Fan-out, dead letters, fix, replay…"
    )
    with (
        log_dir_for(console, keep_logs, "bulk") as log_dir,
        redis_url() as url,
        Live(console=console, refresh_per_second=4) as live,
    ):
        report, _ = run_bulk_demo(
            url, config, log_dir=log_dir, on_sample=lambda s, n: live.update(bulk_table(s, n))
        )
    finish(console, report, json_path)


def overload_scenario(
    console: Console,
    vermas: int,
    bulk: int,
    customs_rate: float,
    customs_burst: int,
    workers: int,
    seed: int,
    json_path: Path | None,
    keep_logs: bool,
) -> None:
    from tidegate.harness.scenarios.overload import OverloadConfig, live_table, run_overload_demo

    config = OverloadConfig(
        vermas=vermas,
        bulk=bulk,
        customs_rate=customs_rate,
        customs_burst=customs_burst,
        customs_workers=workers,
        seed=seed,
    )
    console.print(
        f"[bold]A surge the fleet cannot absorb:[/] {bulk} bulk B/L PDFs (sheddable) and "
        f"{vermas} VERMAS (never shed); customs gateway {customs_rate:g}/s, document store "
        f"{config.docstore_rate:g}/s; HWM {config.hwm}, LWM {config.lwm}."
    )
    with contextlib.ExitStack() as stack:
        log_dir = stack.enter_context(log_dir_for(console, keep_logs, "overload"))
        events_to_log_file(stack, log_dir, "monitor.log")  # the monitor runs in this process
        url = stack.enter_context(redis_url())
        live = stack.enter_context(Live(console=console, refresh_per_second=4))
        report, _ = run_overload_demo(
            url, config, log_dir=log_dir, on_sample=lambda s, n: live.update(live_table(s, n))
        )
    finish(console, report, json_path)


def gate_scenario(console: Console, json_path: Path | None) -> None:
    from tidegate.harness.scenarios.gate import run_gate_demo

    with redis_url() as url:
        console.print("[bold]4 processes[/] push 120 documents through one gate of 20/s…")
        report = run_gate_demo(url).as_dict()
    finish(console, report, json_path)


def chaos_scenario(
    console: Console,
    kind: str,
    tuning: Mapping[str, Any],
    json_path: Path | None,
    plot_path: Path | None,
    keep_logs: bool,
    broker_url: str | None = None,
) -> None:
    """The burst under a fault; the flags given replace the preset's values. A failed
    check exits 1 after the tables and files, so a script or CI sees it."""
    from tidegate.harness.chaos import preset, run_chaos

    config = preset(kind).tuned(**tuning)
    burst = config.vessel
    limits = {
        "customs": f"{burst.customs_rate:g}/s",
        "tos": f"{burst.tos_connections} connections",
    }
    console.print(
        f"[bold]Chaos — {kind}:[/] {burst.interchanges} interchanges, fault at "
        f"t = {config.fault_at_s:g} s; customs gateway {burst.customs_rate:g}/s "
        f"(burst {burst.customs_burst}), {burst.workers} customs workers, seed {burst.seed}."
    )
    with (
        log_dir_for(console, keep_logs, f"chaos-{kind}") as log_dir,
        Live(console=console, refresh_per_second=4) as live,
    ):
        report, samples = run_chaos(
            config,
            broker_url=broker_url,
            log_dir=log_dir,
            on_sample=lambda s, n: live.update(live_table(s, n, limits)),
        )
        if not keep_logs:
            report["log_dir"] = None
    finish(console, report, json_path, plot_path=plot_path, samples=samples)
    failed = [c["name"] for c in report["chaos"]["checks"] if not c["ok"]]
    if failed:
        raise TidegateCLIError(f"chaos {kind}: {len(failed)} check(s) failed: {', '.join(failed)}")
