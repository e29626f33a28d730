"""``tidegate monitor``, ``tidegate metrics`` and ``tidegate watermarks``.

``monitor`` runs the sampling loop (:mod:`tidegate.ops.monitor`) and, with
``--metrics-port``, serves ``/metrics``; ``metrics`` serves (or prints once) the same
fleet-wide metrics without sampling; ``watermarks`` shows and retunes the live HWM /
LWM / shed delay in Redis, like ``tidegate gate set`` does for a gate.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import click
from rich.table import Table

from tidegate.cli._common import (
    FiniteFloat,
    TidegateCLIError,
    bad_option,
    connection_options,
    echo_json,
    prefix_option,
    process_settings,
    redis_client,
)
from tidegate.cli._output import console, print_table
from tidegate.cli._producer import build_replay_admission, watermark_store
from tidegate.errors import ConfigurationError, TidegateError

__all__ = ["build_replay_admission", "metrics", "monitor", "prefix_option", "watermarks"]

#: Queues monitored when none are given: the preset's, with their gates.
DEFAULT_QUEUE_SPECS = ("edi.customs=customs", "edi.tos=tos", "bulk.dispatch", "bl.parse")
#: Largest watermark an operator may set, messages.
MAX_WATERMARK = 1_000_000_000
#: Longest run of samples above HWM before shedding an operator may set.
MAX_SHED_AFTER = 100_000

#: The names the watermark errors use, and the flags an operator types for them.
_WATERMARK_FLAGS = {
    "QUEUE_HWM": "--hwm",
    "QUEUE_LWM": "--lwm",
    "SHED_AFTER_INTERVALS": "--shed-after",
    "hwm": "--hwm",
    "lwm": "--lwm",
    "shed_after": "--shed-after",
}
broker_url_option = click.option(
    "--broker-url",
    envvar=["TIDEGATE_BROKER_URL", "CELERY_BROKER_URL"],
    show_envvar=True,
    show_default=False,
    help="The broker (redis:// or amqp://); defaults to the Redis URL.",
)
sender_option = click.option(
    "--sender",
    type=click.Choice(["celery", "rq"]),
    default="celery",
    show_default=True,
    help="How replayed documents are queued.",
)


def _parse_specs(values: tuple[str, ...]) -> list[tuple[str, str | None]]:
    specs = []
    for value in values or DEFAULT_QUEUE_SPECS:
        queue, _, gate = value.partition("=")
        if not queue.strip():
            raise click.BadParameter(f"expected QUEUE or QUEUE=GATE, got {value!r}")
        specs.append((queue.strip(), gate.strip() or None))
    return specs


def resolve_broker(url: str | None, broker_url: str | None) -> str:
    target = broker_url or url or os.environ.get("REDIS_URL")
    if not target:
        raise TidegateCLIError("no broker: pass --broker-url or --redis-url")
    return target


@click.command()
@connection_options
@broker_url_option
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="QUEUE[=GATE]",
    help="A queue to sample and the gate its tasks go through (repeatable). "
    f"Default: {', '.join(DEFAULT_QUEUE_SPECS)}.",
)
@click.option(
    "--interval",
    type=FiniteFloat(min=0.05, max=3600),
    envvar="TIDEGATE_MONITOR_INTERVAL_S",
    default=5.0,
    show_default=True,
    help="Seconds between samples.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (0 = any free port).",
)
@click.option(
    "--metrics-addr",
    default="0.0.0.0",  # noqa: S104
    show_default=True,
    help="Address the metrics server listens on.",
)
@click.option(
    "--replay/--no-replay",
    default=True,
    show_default=True,
    help="Replay quarantined documents once a queue is back below its LWM.",
)
@click.option(
    "--replay-rate",
    type=FiniteFloat(min=0.01, max=10_000),
    envvar="TIDEGATE_REPLAY_RATE",
    default=50.0,
    show_default=True,
    help="Quarantined documents replayed per second and queue, at most.",
)
@sender_option
@click.option(
    "--backlog-per-worker",
    type=click.IntRange(1),
    default=50,
    show_default=True,
    help="Messages one worker is expected to absorb (sizes scale_out).",
)
@click.option(
    "--service-s",
    type=FiniteFloat(min=0.001, max=86_400),
    default=1.0,
    show_default=True,
    help="Seconds one task takes, for the worker count a backlog needs.",
)
@click.option(
    "--overhead-s",
    type=FiniteFloat(min=0.0, max=86_400),
    default=0.0,
    show_default=True,
    help="Seconds a task costs a worker outside the downstream call (ledger, ack, fetch): "
    "under a concurrency cap a pool needs cap × (service + overhead) / service + 1 workers.",
)
@click.option(
    "--min-workers",
    type=click.IntRange(0),
    default=1,
    show_default=True,
    help="Fewest workers scale_in asks for.",
)
@click.option(
    "--max-workers",
    type=click.IntRange(1),
    default=64,
    show_default=True,
    help="Most workers scale_out asks for.",
)
@click.option("--iterations", type=click.IntRange(1), default=None, hidden=True)
def monitor(
    redis_url: str | None,
    broker_url: str | None,
    prefix: str,
    queues: tuple[str, ...],
    interval: float,
    metrics_port: int | None,
    metrics_addr: str,
    replay: bool,
    replay_rate: float,
    sender: str,
    backlog_per_worker: int,
    service_s: float,
    overhead_s: float,
    min_workers: int,
    max_workers: int,
    iterations: int | None,
) -> None:
    """Sample every queue, emit scale_out/hold/scale_in, replay the quarantine.

    One JSON event per sample and queue (queue_depth_sampled) on stderr, one per
    signal change (scaling_signal_changed). Several monitors may run: one samples,
    the others stand by.
    """
    from tidegate.integrations.celery.depth import probe_from_url
    from tidegate.load.watermarks import ScalingPolicy
    from tidegate.ops.metrics import MetricsServer, registry_for
    from tidegate.ops.monitor import Monitor, QueueSpec

    specs = _parse_specs(queues)
    broker = resolve_broker(redis_url, broker_url)
    settings = process_settings()
    with redis_client(redis_url) as client:
        try:
            policy = ScalingPolicy(
                backlog_per_worker=backlog_per_worker,
                service_s=service_s,
                overhead_s=overhead_s,
                min_workers=min_workers,
                max_workers=max_workers,
            )
            if sender == "rq":
                from tidegate._redis import client_from_url
                from tidegate.integrations.rq import RqDepthProbe

                probe: Any = RqDepthProbe(client_from_url(broker))
            else:
                probe = probe_from_url(broker)
            admission = (
                build_replay_admission(
                    client,
                    broker,
                    [q for q, _ in specs],
                    prefix=prefix,
                    sender=sender,
                    settings=settings,
                )
                if replay
                else None
            )
            loop = Monitor(
                client,
                probe,
                [QueueSpec(queue, gate, policy) for queue, gate in specs],
                prefix=prefix,
                interval_s=interval,
                admission=admission,
                replay_rate=replay_rate,
                settings=settings,
            )
        except TidegateError as exc:
            raise TidegateCLIError(str(exc)) from exc
        server = None
        if metrics_port is not None:
            server = MetricsServer(
                registry_for(client, prefix=prefix), port=metrics_port, addr=metrics_addr
            ).start()
            click.echo(f"metrics: {server.url}", err=True)
        try:
            loop.run(iterations=iterations)
        except KeyboardInterrupt:
            pass
        finally:
            loop.stop()
            if server is not None:
                server.stop()
        if iterations is not None:
            echo_json(loop.snapshot())


@click.command()
@connection_options
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9108,
    show_default=True,
    help="Port to serve /metrics on (0 = any free port).",
)
@click.option(
    "--addr",
    default="0.0.0.0",  # noqa: S104
    show_default=True,
    help="Address to serve /metrics on.",
)
@click.option("--once", is_flag=True, help="Print the exposition once on stdout and exit.")
def metrics(redis_url: str | None, prefix: str, port: int, addr: str, once: bool) -> None:
    """Serve tidegate's fleet-wide Prometheus metrics (read from Redis at each scrape)."""
    from prometheus_client import generate_latest

    from tidegate.ops.metrics import MetricsServer, registry_for

    with redis_client(redis_url) as client:
        registry = registry_for(client, prefix=prefix)
        if once:
            click.echo(generate_latest(registry).decode(), nl=False)
            return
        server = MetricsServer(registry, port=port, addr=addr).start()
        click.echo(f"metrics: {server.url}", err=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()


def _watermark_output(
    as_json: bool, queue: str | None, effective: dict[str, int], store: Any | None = None
) -> None:
    if as_json:
        shown: dict[str, Any] = {"queue": queue, **effective}
        if store is not None:
            shown |= {"defaults": store.defaults.as_dict(), "overrides": store.overrides()}
        echo_json(shown)
        return
    overrides = store.overrides() if store is not None else {}
    table = Table(title=f"watermarks of {queue or 'every queue'}")
    for column in ("field", "value", "source"):
        table.add_column(column)
    for name, value in effective.items():
        if queue is not None and f"{name}@{queue}" in overrides:
            source = f"live for {queue} (set by watermarks set)"
        elif name in overrides:
            source = "live (set by watermarks set)"
        else:
            source = "default"
        table.add_row(name, str(value), source if store is not None else "")
    print_table(console(), table)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


@click.group()
def watermarks() -> None:
    """Show or retune the queues' watermarks (live, fleet-wide, in Redis)."""


@watermarks.command("show")
@connection_options
@click.option("--queue", default=None, help="The effective values of this queue.")
@json_option
def show(redis_url: str | None, prefix: str, queue: str | None, as_json: bool) -> None:
    """The effective watermarks, and whether each is a live override or the default."""
    with redis_client(redis_url) as client:
        store = watermark_store(client, prefix)
        _watermark_output(as_json, queue, store.get(queue).as_dict(), store)


@watermarks.command("set")
@connection_options
@click.option("--queue", default=None, help="Only this queue (default: every queue).")
@click.option(
    "--hwm",
    type=click.IntRange(1, MAX_WATERMARK),
    default=None,
    help="High watermark: above this depth (messages) the queue is overloaded.",
)
@click.option(
    "--lwm",
    type=click.IntRange(0, MAX_WATERMARK),
    default=None,
    help="Low watermark: at or below this depth (messages) the surge is over.",
)
@click.option(
    "--shed-after",
    type=click.IntRange(1, MAX_SHED_AFTER),
    default=None,
    help="Samples above HWM before shedding.",
)
@json_option
def set_(
    redis_url: str | None,
    prefix: str,
    queue: str | None,
    hwm: int | None,
    lwm: int | None,
    shed_after: int | None,
    as_json: bool,
) -> None:
    """Retune the running fleet (validated first: 0 <= --lwm < --hwm, --shed-after >= 1)."""
    with redis_client(redis_url) as client:
        store = watermark_store(client, prefix)
        try:
            result = store.configure(queue=queue, hwm=hwm, lwm=lwm, shed_after=shed_after)
        except ConfigurationError as exc:
            raise bad_option(exc, _WATERMARK_FLAGS) from exc
        _watermark_output(as_json, queue, result.as_dict(), store)


@watermarks.command("reset")
@connection_options
@click.option("--queue", default=None, help="Only this queue's overrides.")
@json_option
def reset(redis_url: str | None, prefix: str, queue: str | None, as_json: bool) -> None:
    """Drop the Redis overrides: back to the environment's defaults."""
    with redis_client(redis_url) as client:
        store = watermark_store(client, prefix)
        store.reset(queue)
        _watermark_output(as_json, queue, store.get(queue).as_dict(), store)
