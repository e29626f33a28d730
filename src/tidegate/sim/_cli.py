"""``python -m tidegate.sim``: run one simulated downstream as its own process.

The first line on stdout is one JSON object, ``{"url": ..., "endpoint": ..., "kind":
..., "path": ..., "pid": ...}``, printed once the port is bound, so a parent process
reads one line and starts calling. Nothing else goes to stdout; log lines go to
stderr. SIGTERM or SIGINT stops the sim and exits 0; so does the end of stdin with
``--until-stdin-closes``: a parent that holds the pipe's other end and dies — a SIGKILL
gives it no chance to send SIGTERM — takes the sim with it (the kernel closes the pipe),
instead of leaving it serving on its port.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import IO, Any, TypeVar

import click

from tidegate.errors import ConfigurationError
from tidegate.logging import configure
from tidegate.sim._base import DEFAULT_HOST, SimServer
from tidegate.sim._customs import CustomsSim
from tidegate.sim._database import DatabaseSim
from tidegate.sim._tos import TosSim

__all__ = ["main", "serve"]

_F = TypeVar("_F", bound=Callable[..., Any])


def serve(
    sim: SimServer,
    *,
    ready: Callable[[str], object] = click.echo,
    lifeline: IO[bytes] | None = None,
) -> None:
    """Start ``sim``, announce its URL through ``ready``, serve until SIGTERM/SIGINT
    (or the end of ``lifeline``: its writer is gone).

    Must be called from the main thread (it installs signal handlers).
    """
    stop = threading.Event()
    if lifeline is not None:
        threading.Thread(
            target=_until_closed, args=(lifeline, stop), name="sim-lifeline", daemon=True
        ).start()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with sim:
            announce = {
                "url": sim.url,
                "endpoint": sim.endpoint,
                "kind": sim.kind,
                "path": sim.path,
                "pid": os.getpid(),
            }
            ready(json.dumps(announce))
            stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _until_closed(stream: IO[bytes], stop: threading.Event) -> None:
    """Read ``stream`` to its end (nobody writes to it), then stop the sim."""
    while stream.read(4096):
        pass
    stop.set()


def _server_options(default_path: str) -> Callable[[_F], _F]:
    def decorate(command: _F) -> _F:
        options = [
            click.option(
                "--host", default=DEFAULT_HOST, show_default=True, help="Address to bind."
            ),
            click.option(
                "--port",
                type=click.IntRange(0, 65535),
                default=0,
                show_default=True,
                help="Port to bind; 0 picks a free one (read it from the first stdout line).",
            ),
            click.option("--path", default=default_path, show_default=True, help="The write path."),
            click.option(
                "--log-level",
                type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
                default="WARNING",
                show_default=True,
                help="Log lines (JSON) go to stderr.",
            ),
            click.option(
                "--until-stdin-closes",
                is_flag=True,
                help="Stop at the end of stdin: a parent holding it open takes the sim "
                "with it when it dies.",
            ),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _run(build: Callable[[], SimServer], log_level: str, until_stdin_closes: bool) -> None:
    """Build the sim (bad settings are usage errors), then serve it."""
    configure(level=log_level)
    try:
        sim = build()
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        serve(sim, lifeline=sys.stdin.buffer if until_stdin_closes else None)
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {sim.host}: {exc}") from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run a simulated downstream on loopback until SIGTERM."""


@main.command()
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="Enforced calls per second.",
)
@click.option(
    "--burst",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Calls accepted back to back.",
)
@click.option(
    "--suspend-after",
    type=click.IntRange(min=1),
    default=None,
    help="429s within the window that suspend the caller (off by default).",
)
@click.option(
    "--suspend-window-s",
    type=float,
    default=10.0,
    show_default=True,
    help="Sliding window counting offences, seconds.",
)
@click.option(
    "--suspend-s", type=float, default=30.0, show_default=True, help="Suspension length, seconds."
)
@click.option(
    "--retry-after-format",
    type=click.Choice(["seconds", "http-date"]),
    default="seconds",
    show_default=True,
)
@click.option(
    "--service-s", type=float, default=0.0, show_default=True, help="Processing time per call."
)
@_server_options("/declarations")
def customs(
    *,
    rate: float,
    burst: int,
    suspend_after: int | None,
    suspend_window_s: float,
    suspend_s: float,
    retry_after_format: Any,
    service_s: float,
    host: str,
    port: int,
    path: str,
    log_level: str,
    until_stdin_closes: bool,
) -> None:
    """The customs gateway: per-second token bucket, 429 + Retry-After, suspension."""
    build = functools.partial(
        CustomsSim,
        rate,
        burst,
        suspend_after=suspend_after,
        suspend_window_s=suspend_window_s,
        suspend_s=suspend_s,
        retry_after_format=retry_after_format,
        service_s=service_s,
        path=path,
        host=host,
        port=port,
    )
    _run(build, log_level, until_stdin_closes)


@main.command()
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Requests in flight at once; 503 beyond.",
)
@click.option(
    "--service-s", type=float, default=0.05, show_default=True, help="Processing time per call."
)
@click.option(
    "--retry-after-s",
    type=click.IntRange(min=1),
    default=None,
    help="Retry-After sent with the 503 (none by default).",
)
@_server_options("/container-reports")
def tos(
    *,
    max_connections: int,
    service_s: float,
    retry_after_s: int | None,
    host: str,
    port: int,
    path: str,
    log_level: str,
    until_stdin_closes: bool,
) -> None:
    """The terminal operating system: at most K requests in flight, 503 beyond."""
    build = functools.partial(
        TosSim,
        max_connections,
        service_s,
        retry_after_s=retry_after_s,
        path=path,
        host=host,
        port=port,
    )
    _run(build, log_level, until_stdin_closes)


@main.command()
@click.option(
    "--base-latency-s",
    type=float,
    default=0.005,
    show_default=True,
    help="Latency of a lone writer, seconds.",
)
@click.option(
    "--per-writer-s",
    type=float,
    default=0.005,
    show_default=True,
    help="Latency added per extra concurrent writer, seconds.",
)
@_server_options("/writes")
def database(
    *,
    base_latency_s: float,
    per_writer_s: float,
    host: str,
    port: int,
    path: str,
    log_level: str,
    until_stdin_closes: bool,
) -> None:
    """The database: latency = base + per_writer × (concurrent writers − 1)."""
    build = functools.partial(
        DatabaseSim, base_latency_s, per_writer_s, path=path, host=host, port=port
    )
    _run(build, log_level, until_stdin_closes)
