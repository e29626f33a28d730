"""``tidegate gate``: look at and retune a downstream's fleet-wide gate while it runs."""

from __future__ import annotations

import click
from rich.table import Table

from tidegate.cli._common import TidegateCLIError, echo_json, redis_client, redis_url_option
from tidegate.cli._output import console, print_table
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate, GateState

__all__ = ["gate"]


def _show(state: GateState) -> None:
    table = Table(title=f"gate {state.name}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    over = set(state.overridden)
    for key, value in state.as_dict().items():
        if key in {"name", "overridden"}:
            continue
        mark = " (live override)" if key in over else ""
        table.add_row(key, f"{value}{mark}")
    print_table(console(), table)


@click.group()
def gate() -> None:
    """Show and retune the fleet-wide gate of a downstream."""


@gate.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@redis_url_option
def show(name: str, as_json: bool, redis_url: str | None) -> None:
    """Show NAME's effective rate, burst, concurrency, pause and leases."""
    with redis_client(redis_url) as client:
        state = Gate(client, name).state()
    if as_json:
        echo_json(state.as_dict())
    else:
        _show(state)


@gate.command(name="set")
@click.argument("name")
@click.option("--rate", type=float, help="Sustained admissions per second (> 0).")
@click.option("--burst", type=int, help="Admissions allowed back to back (>= 1).")
@click.option("--concurrency", type=int, help="Calls in flight fleet-wide; 0 removes the cap.")
@click.option("--lease-s", type=float, help="Seconds a crashed holder keeps its slot.")
@click.option("--yes", is_flag=True, help="Confirm a change that removes a protection.")
@click.option("--json", "as_json", is_flag=True, help="Print the new state as JSON.")
@redis_url_option
def set_(
    name: str,
    rate: float | None,
    burst: int | None,
    concurrency: int | None,
    lease_s: float | None,
    yes: bool,
    as_json: bool,
    redis_url: str | None,
) -> None:
    """Retune NAME for the whole running fleet (no restart)."""
    if concurrency == 0 and not yes:
        raise TidegateCLIError(
            "--concurrency 0 removes the concurrency cap for the whole fleet; repeat with --yes"
        )
    with redis_client(redis_url) as client:
        try:
            state = Gate(client, name).configure(
                rate=rate, burst=burst, concurrency=concurrency, lease_s=lease_s
            )
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc)) from exc
    if as_json:
        echo_json(state.as_dict())
    else:
        _show(state)


@gate.command()
@click.argument("name")
@click.argument("seconds", type=float)
@click.option("--reason", default="operator", show_default=True, help="Recorded with the pause.")
@redis_url_option
def pause(name: str, seconds: float, reason: str, redis_url: str | None) -> None:
    """Stop every admission to NAME fleet-wide for SECONDS."""
    with redis_client(redis_url) as client:
        try:
            remaining = Gate(client, name).pause(seconds, reason)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc)) from exc
    click.echo(f"gate {name} paused for {remaining:.1f}s ({reason})")


@gate.command()
@click.argument("name")
@redis_url_option
def resume(name: str, redis_url: str | None) -> None:
    """End a pause of NAME now."""
    with redis_client(redis_url) as client:
        Gate(client, name).resume()
    click.echo(f"gate {name} resumed")
