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

from tidegate.cli._common import TidegateCLIError, echo_json, redis_client, redis_url_option
from tidegate.errors import TidegateError
from tidegate.flow.backends.base import DEFAULT_PREFIX

__all__ = ["metrics", "monitor", "watermarks"]

#: Queues monitored when none are given: the preset's, with their gates.
DEFAULT_QUEUE_SPECS = ("edi.customs=customs", "edi.tos=tos", "bulk.dispatch", "bl.parse")

prefix_option = click.option(
    "--prefix",
    envvar="TIDEGATE_PREFIX",
    default=DEFAULT_PREFIX,
    show_default=True,
    help="Prefix of tidegate's Redis keys (the workers' TIDEGATE_PREFIX).",
)
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


def build_replay_admission(
    client: Any, broker: str, queues: list[str], *, prefix: str, sender: str
) -> Any:
    """The intake replays go through: the broker's probe and sender, tidegate's Redis."""
    from tidegate.load.admission import Admission, CelerySender
    from tidegate.load.depth import probe_from_url
    from tidegate.load.quarantine import Quarantine
    from tidegate.load.watermarks import LoadBoard, WatermarkStore

    if sender == "rq":
        from tidegate._redis import client_from_url
        from tidegate.integrations.rq import RqDepthProbe, RqSender

        connection = client_from_url(broker)
        probe: Any = RqDepthProbe(connection)
        out: Any = RqSender(connection)
    else:
        from celery import Celery

        probe = probe_from_url(broker)
        out = CelerySender(Celery(broker=broker))
    return Admission(
        out,
        dict.fromkeys(queues, ""),
        probe=probe,
        quarantine=Quarantine(client, prefix=prefix),
        watermarks=WatermarkStore(client, prefix=prefix),
        board=LoadBoard(client, prefix=prefix),
    )


@click.command()
@redis_url_option
@broker_url_option
@prefix_option
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
    type=click.FloatRange(min=0.05),
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
@click.option("--metrics-addr", default="0.0.0.0", show_default=True)  # noqa: S104
@click.option("--replay/--no-replay", default=True, show_default=True)
@click.option(
    "--replay-rate",
    type=click.FloatRange(min=0.01),
    envvar="TIDEGATE_REPLAY_RATE",
    default=50.0,
    show_default=True,
    help="Quarantined documents replayed per second and queue, at most.",
)
@sender_option
@click.option("--backlog-per-worker", type=click.IntRange(1), default=50, show_default=True)
@click.option("--service-s", type=click.FloatRange(min=0.001), default=1.0, show_default=True)
@click.option("--min-workers", type=click.IntRange(0), default=1, show_default=True)
@click.option("--max-workers", type=click.IntRange(1), default=64, show_default=True)
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
    min_workers: int,
    max_workers: int,
    iterations: int | None,
) -> None:
    """Sample every queue, emit scale_out/hold/scale_in, replay the quarantine.

    One JSON event per sample and queue (queue_depth_sampled) on stderr, one per
    signal change (scaling_signal_changed). Several monitors may run: one samples,
    the others stand by.
    """
    from tidegate.load.depth import probe_from_url
    from tidegate.load.watermarks import ScalingPolicy
    from tidegate.ops.metrics import MetricsServer, registry_for
    from tidegate.ops.monitor import Monitor, QueueSpec

    specs = _parse_specs(queues)
    broker = resolve_broker(redis_url, broker_url)
    with redis_client(redis_url) as client:
        try:
            policy = ScalingPolicy(
                backlog_per_worker=backlog_per_worker,
                service_s=service_s,
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
                    client, broker, [q for q, _ in specs], prefix=prefix, sender=sender
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
@redis_url_option
@prefix_option
@click.option("--port", type=click.IntRange(0, 65535), default=9108, show_default=True)
@click.option("--addr", default="0.0.0.0", show_default=True)  # noqa: S104
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


@click.group()
def watermarks() -> None:
    """Show or retune the queues' watermarks (live, fleet-wide, in Redis)."""


@watermarks.command("show")
@redis_url_option
@prefix_option
@click.option("--queue", default=None, help="The effective values of this queue.")
def show(redis_url: str | None, prefix: str, queue: str | None) -> None:
    """The effective watermarks and the overrides stored in Redis."""
    from tidegate.load.watermarks import WatermarkStore

    with redis_client(redis_url) as client:
        store = WatermarkStore(client, prefix=prefix)
        echo_json(
            {
                "queue": queue,
                **store.get(queue).as_dict(),
                "defaults": store.defaults.as_dict(),
                "overrides": store.overrides(),
            }
        )


@watermarks.command("set")
@redis_url_option
@prefix_option
@click.option("--queue", default=None, help="Only this queue (default: every queue).")
@click.option("--hwm", type=int, default=None, help="High watermark (messages).")
@click.option("--lwm", type=int, default=None, help="Low watermark (messages).")
@click.option("--shed-after", type=int, default=None, help="Samples above HWM before shedding.")
def set_(
    redis_url: str | None,
    prefix: str,
    queue: str | None,
    hwm: int | None,
    lwm: int | None,
    shed_after: int | None,
) -> None:
    """Retune the running fleet (validated: 0 <= LWM < HWM, shed-after >= 1)."""
    from tidegate.load.watermarks import WatermarkStore

    with redis_client(redis_url) as client:
        result = WatermarkStore(client, prefix=prefix).configure(
            queue=queue, hwm=hwm, lwm=lwm, shed_after=shed_after
        )
        echo_json({"queue": queue, **result.as_dict()})


@watermarks.command("reset")
@redis_url_option
@prefix_option
@click.option("--queue", default=None, help="Only this queue's overrides.")
def reset(redis_url: str | None, prefix: str, queue: str | None) -> None:
    """Drop the Redis overrides: back to the environment's defaults."""
    from tidegate.load.watermarks import WatermarkStore

    with redis_client(redis_url) as client:
        store = WatermarkStore(client, prefix=prefix)
        store.reset(queue)
        echo_json({"queue": queue, **store.get(queue).as_dict()})
