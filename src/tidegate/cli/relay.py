"""``tidegate relay NAME``: run a relayed downstream's lanes in a process of their own.

A Celery pool child runs a lane itself (:meth:`tidegate.runtime.Runtime.relay`); a
fleet whose processes end with their job (RQ's work horses) runs its lanes here
instead. The downstream's settings say where it is and how deep each connection's
pipeline goes (``TIDEGATE_<NAME>_URL``, ``TIDEGATE_<NAME>_RELAY_DEPTH``); the gate's
concurrency cap says how many lanes hold a connection fleet-wide, so a second
``tidegate relay`` is a standby whose lanes take over the leases of one that dies.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from tidegate.cli._common import (
    TidegateCLIError,
    connection_options,
    process_settings,
    redis_client,
)
from tidegate.downstream.relay import Relay, RelayPolicy
from tidegate.errors import ConfigurationError

__all__ = ["relay"]


@click.command("relay")
@click.argument("name")
@click.option(
    "--lanes",
    type=click.IntRange(min=1),
    default=None,
    help="Lanes in this process (default: the gate's concurrency cap).",
)
@connection_options
def relay(name: str, lanes: int | None, redis_url: str | None, prefix: str) -> None:
    """Send downstream NAME's calls from the fleet over pipelined connections, until
    SIGTERM or Ctrl-C (the lanes answer what they have in flight, then exit)."""
    try:
        settings = process_settings().downstream(name)
    except ConfigurationError as exc:
        raise TidegateCLIError(str(exc)) from None
    if not settings.url:
        raise TidegateCLIError(f"no URL for downstream {name!r}: set TIDEGATE_{name.upper()}_URL")
    if settings.relay_depth is None:
        raise TidegateCLIError(
            f"downstream {name!r} is not relayed: set TIDEGATE_{name.upper()}_RELAY_DEPTH"
        )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    with redis_client(redis_url) as client:
        try:
            lanes_here = Relay(
                client,
                name,
                settings.url,
                lanes=lanes,
                policy=RelayPolicy(depth=settings.relay_depth),
                prefix=prefix,
                gate_policy=settings.gate,
            )
        except ConfigurationError as exc:
            raise TidegateCLIError(str(exc)) from None
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            with lanes_here:
                click.echo(
                    f"relay {name}: {lanes_here.lanes} lane(s), depth {settings.relay_depth}",
                    err=True,
                )
                stop.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
