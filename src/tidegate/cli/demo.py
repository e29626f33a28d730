"""``tidegate demo``: see the flow control work, end to end, on this machine.

Every flag does what it says or is refused: each run (a scenario, or the vessel burst
under ``--chaos``) names the flags it reads in :data:`ACCEPTS`, and a flag given to a
run that would not read it is a usage error, not a silent no-op. Worker and monitor logs
go to a temporary directory removed at the end unless ``--keep-logs`` asks for them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from tidegate._redis import client_from_url, refused_write_in_chain, unwritable_cause
from tidegate.cli._common import TidegateCLIError
from tidegate.cli._demo_runs import (
    bulk_scenario,
    chaos_scenario,
    gate_scenario,
    overload_scenario,
    vessel_scenario,
)
from tidegate.cli._output import console as make_console
from tidegate.errors import BrokerUnreachable
from tidegate.keys import Keyspace

__all__ = ["ACCEPTS", "CHAOS_KINDS", "check_flags", "demo"]

#: ``--chaos`` choices: the scenarios of :mod:`tidegate.harness.chaos` (kept literal so the
#: CLI starts without importing Celery).
CHAOS_KINDS = (
    "kill-workers",
    "redis-restart",
    "host-crash",
    "downstream-outage",
    "slow-downstream",
    "slow-commit",
    "poison",
    "broker-restart",
    "redis-oom",
)

_VESSEL = frozenset(
    {
        "interchanges",
        "customs_rate",
        "customs_burst",
        "workers",
        "seed",
        "json_path",
        "plot_path",
        "keep_logs",
        "broker",
    }
)

#: The parameters each run reads ("chaos" is the vessel burst under ``--chaos``); any
#: other demo flag given to it is refused.
ACCEPTS: Mapping[str, frozenset[str]] = {
    "vessel": _VESSEL | {"console_on", "tos_relay_depth"},
    "chaos": _VESSEL,
    "bulk": frozenset({"bls", "workers", "seed", "json_path", "keep_logs"}),
    "overload": frozenset(
        {"vermas", "bulk", "customs_rate", "customs_burst", "workers", "seed"}
        | {"json_path", "keep_logs"}
    ),
    "gate": frozenset({"json_path"}),
    "adaptive": frozenset(
        {"interchanges", "customs_rate", "customs_burst", "workers", "seed"}
        | {"json_path", "plot_path", "keep_logs"}
    ),
}

#: Parameters that choose the run rather than tune it.
_SELECTORS = frozenset({"scenario", "chaos_kind", "engine"})
#: The runs ``--engine rq`` has: the vessel burst, alone or under ``--chaos kill-workers``.
_RQ_RUNS = frozenset({"vessel", "chaos"})


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source not in {
        click.core.ParameterSource.DEFAULT,
        click.core.ParameterSource.DEFAULT_MAP,
    }


def _flag(ctx: click.Context, name: str) -> str:
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option):
            return max(param.opts, key=len)
    return name


def check_flags(ctx: click.Context) -> str:
    """Return the run ``ctx`` asks for; refuse (usage error) a flag that run ignores.

    A flag counts as given when it came from the command line or the environment
    (``TIDEGATE_DEMO_*``): both are the operator's intent.
    """
    scenario, chaos_kind = ctx.params["scenario"], ctx.params["chaos_kind"]
    if chaos_kind is not None and scenario != "vessel":
        raise click.UsageError("--chaos applies to --scenario vessel", ctx=ctx)
    run = "chaos" if chaos_kind is not None else scenario
    if ctx.params.get("engine") == "rq" and (
        run not in _RQ_RUNS or chaos_kind not in {None, "kill-workers"}
    ):
        raise click.UsageError(
            "--engine rq runs --scenario vessel, alone or with --chaos kill-workers", ctx=ctx
        )
    accepted = ACCEPTS[run]
    refused = [
        _flag(ctx, name)
        for name in ctx.params
        if name not in _SELECTORS and name not in accepted and _given(ctx, name)
    ]
    if refused:
        what = f"--chaos {chaos_kind}" if run == "chaos" else f"--scenario {scenario}"
        takes = ", ".join(sorted(_flag(ctx, name) for name in accepted))
        raise click.UsageError(
            f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not apply to "
            f"{what} (it takes {takes})",
            ctx=ctx,
        )
    return run


@click.command()
@click.option(
    "--scenario",
    type=click.Choice(["vessel", "bulk", "overload", "gate", "adaptive"]),
    default="vessel",
    show_default=True,
    help="vessel: a berthing burst through Celery workers and the gates; "
    "bulk: an IFCSUM fanned out per B/L, 1 % poison, fix and replay; "
    "overload: sheddable bulk documents and VERMAS together, shed and replayed; "
    "gate: 4 processes through one rate limit (takes only --json); "
    "adaptive: a smaller vessel burst (default 1200) through an adaptive customs gate that "
    "must find the gateway's hidden --customs-rate, with a maintenance dip.",
)
@click.option(
    "--bls",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    help="bulk: consignments (B/Ls) in the manifest.",
)
@click.option(
    "--interchanges",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    help="vessel: interchanges in the berthing burst (with --chaos: default the scenario's size).",
)
@click.option(
    "--customs-rate",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="vessel, overload: the customs gateway's real per-second rate (with --chaos: "
    "default the scenario's).",
)
@click.option(
    "--customs-burst",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="vessel, overload: the customs gateway's bucket size (with --chaos: default the "
    "scenario's).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    help="vessel, bulk, overload: processes in the customs pool (vessel: the TOS pool gets "
    "what keeps its connections busy; bulk: in each pool; with --chaos: default the "
    "scenario's).",
)
@click.option(
    "--vermas",
    type=click.IntRange(0),
    default=500,
    show_default=True,
    help="overload: VERMAS declarations (never shed).",
)
@click.option(
    "--bulk",
    type=click.IntRange(0),
    default=5000,
    show_default=True,
    help="overload: sheddable bulk documents.",
)
@click.option(
    "--seed",
    type=int,
    default=7,
    show_default=True,
    help="vessel, bulk, overload: seed of the generated documents.",
)
@click.option(
    "--chaos",
    "chaos_kind",
    type=click.Choice(CHAOS_KINDS),
    help="vessel: break one thing during a full-size burst and check that nothing is lost "
    "(its own embedded Redis); exits 1 when a check fails.",
)
@click.option(
    "--broker",
    metavar="AMQP_URL",
    help="vessel (also with --chaos): run the Celery fleet on this RabbitMQ "
    "(amqp://user:pass@host:5672/), in a vhost of the run's own, removed at the end; "
    "the gate, parking, ledger and DLQ stay on Redis. Its management API is read for "
    "queue depth (RABBITMQ_MANAGEMENT_URL, else the broker's host on port 15672).",
)
@click.option(
    "--engine",
    type=click.Choice(["celery", "rq"]),
    default="celery",
    show_default=True,
    help="vessel (also with --chaos kill-workers): the worker engine the burst runs on.",
)
@click.option(
    "--tos-relay-depth",
    type=click.IntRange(0, 16),
    default=2,
    show_default=True,
    help="vessel (Celery): send the TOS calls through the relay's lanes, this many "
    "requests written ahead on each of its connections; 0: each worker calls the TOS "
    "itself, a lease per call.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the machine-readable report here (its path is printed as 'report:').",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="vessel (also with --chaos): write a PNG of the backlog and of what each "
    "downstream accepted per second against its limit.",
)
@click.option(
    "--console",
    "console_on",
    is_flag=True,
    help="vessel: serve the operator console on the run (loopback; prints its URL and a "
    "password made for this run) and watch the burst move; it closes with the run.",
)
@click.option(
    "--keep-logs",
    is_flag=True,
    help="Keep the worker (and monitor) logs in a tidegate-* temporary directory and "
    "print where; without it they are removed when the run ends.",
)
@click.pass_context
def demo(
    ctx: click.Context,
    scenario: str,
    bls: int,
    interchanges: int,
    customs_rate: float,
    customs_burst: int,
    workers: int,
    vermas: int,
    bulk: int,
    seed: int,
    chaos_kind: str | None,
    broker: str | None,
    engine: str,
    tos_relay_depth: int,
    json_path: Path | None,
    plot_path: Path | None,
    console_on: bool,
    keep_logs: bool,
) -> None:
    """Run a demonstration on an embedded Redis (or REDIS_URL); stops all it starts."""
    run = check_flags(ctx)
    console = make_console()
    if chaos_kind == "broker-restart" and broker is not None:
        raise click.UsageError(
            "--chaos broker-restart starts (and restarts) its own RabbitMQ node: "
            "it does not take --broker",
            ctx=ctx,
        )
    if engine == "rq" and (broker is not None or console_on or _given(ctx, "tos_relay_depth")):
        raise click.UsageError(
            "--engine rq runs RQ workers on Redis: it takes neither --broker, --console "
            "nor --tos-relay-depth",
            ctx=ctx,
        )
    try:
        if engine == "rq":
            from tidegate.cli._demo_rq import rq_vessel_scenario

            tuning = _burst_flags(ctx)
            rq_vessel_scenario(console, tuning, chaos_kind, json_path, plot_path, keep_logs)
        elif chaos_kind is not None:
            tuning = _burst_flags(ctx)
            chaos_scenario(console, chaos_kind, tuning, json_path, plot_path, keep_logs, broker)
        elif run == "gate":
            gate_scenario(console, json_path)
        elif run == "adaptive":
            from tidegate.cli.demo_adaptive import adaptive_scenario

            adaptive_scenario(console, _burst_flags(ctx), json_path, plot_path, keep_logs)
        elif run == "bulk":
            bulk_scenario(console, bls, workers, seed, json_path, keep_logs)
        elif run == "overload":
            overload_scenario(
                console,
                vermas,
                bulk,
                customs_rate,
                customs_burst,
                workers,
                seed,
                json_path,
                keep_logs,
            )
        else:
            vessel_scenario(
                console,
                interchanges,
                customs_rate,
                customs_burst,
                workers,
                seed,
                json_path,
                plot_path,
                keep_logs,
                broker,
                console_on=console_on,
                tos_relay_depth=tos_relay_depth or None,
            )
    except BrokerUnreachable as exc:
        raise TidegateCLIError(str(exc)) from None
    except Exception as exc:
        cause = refused_write_in_chain(exc) or _redis_refuses_writes()
        if cause is None:
            raise
        raise TidegateCLIError(_UNWRITABLE_HINTS.get(cause, _UNWRITABLE_HINTS["oom"])) from None


#: The flags that tune the vessel burst, under whichever run carries it (``--engine rq``,
#: ``--chaos``, ``--scenario adaptive``): each run's configuration owns these names.
_BURST_FLAGS = ("interchanges", "customs_rate", "customs_burst", "workers", "seed")


def _burst_flags(ctx: click.Context) -> dict[str, Any]:
    """The burst flags given on the command line; the others keep the run's own values
    (a chaos preset's 20/s is not overwritten by the vessel demo's default 10/s)."""
    return {name: ctx.params[name] for name in _BURST_FLAGS if _given(ctx, name)}


#: The one line ``tidegate demo`` ends with when its Redis refuses writes, by cause.
_UNWRITABLE_HINTS = {
    "oom": "Redis is unavailable for writes: its memory is full (maxmemory, noeviction). "
    "The demo needs more: raise maxmemory, or unset REDIS_URL to use an embedded Redis.",
    "readonly": "Redis is unavailable for writes: REDIS_URL points at a read-only replica. "
    "Point it at the primary.",
    "misconf": "Redis is unavailable for writes: it cannot save its snapshot (MISCONF). "
    "Fix its disk or persistence settings.",
}


def _redis_refuses_writes() -> str | None:
    """Why ``REDIS_URL`` refuses writes now, or ``None`` (unset, unreachable, or fine).

    A run can fail before any of its own writes does: on a Redis already full, the
    workers cannot even register with the broker, so the fleet never reports ready.
    One probe write (a key that expires at once) tells that case apart from a real bug.
    """
    url = os.environ.get("REDIS_URL")
    if not url:
        return None
    try:
        client_from_url(url).set(Keyspace().demo_write_probe(), b"1", px=1)
    except Exception as exc:  # any failure but a refused write is "not known"
        return unwritable_cause(exc)
    return None
