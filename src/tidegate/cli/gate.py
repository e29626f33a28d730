"""``tidegate gate``: list, look at and retune a downstream's fleet-wide gate while it runs.

Which gates exist: a gate exists when the fleet holds state or live config for it in
Redis under ``--prefix`` (a value set with ``gate set``, a pause, held leases, a rate
bucket in use), or when ``TIDEGATE_<NAME>_RATE`` / ``_BURST`` / ``_CONCURRENCY`` /
``_LEASE_S`` configures it in this shell. Any other name is refused, so a typo never
shows made-up defaults nor "resumes" a gate nobody has; ``--create`` on ``set`` and
``pause`` starts a gate the fleet has not used yet.

What ``show`` reports is what the fleet uses: a live value from Redis, else tidegate's
built-in default — never this shell's own ``TIDEGATE_<NAME>_*`` defaults, which the
workers may not share.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
import redis
from rich.table import Table

from tidegate.cli._adaptive import ADAPTIVE_FLAGS, adaptive_report, write_adaptive
from tidegate.cli._common import (
    FiniteFloat,
    TidegateCLIError,
    bad_option,
    connection_options,
    echo_json,
    redis_client,
)
from tidegate.cli._output import console, print_table
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate, GateState
from tidegate.flow.gate import fleet_gate_names
from tidegate.settings import (
    MAX_BURST,
    MAX_CONCURRENCY,
    MAX_LEASE_S,
    MAX_PAUSE_S,
    MAX_RATE,
    MIN_LEASE_S,
    MIN_RATE,
    GatePolicy,
)

__all__ = ["gate"]

F = TypeVar("F", bound=Callable[..., Any])

#: The policy fields and the ``gate set`` flag that changes each.
_FLAGS = {
    "rate": "--rate",
    "burst": "--burst",
    "concurrency": "--concurrency",
    "lease_s": "--lease-s",
}
_LIVE = "live (set by gate set)"
_DEFAULT = "default"
_ENV_FIELDS = ("RATE", "BURST", "CONCURRENCY", "LEASE_S")

_EXISTS_HELP = (
    "A gate exists when the fleet holds state or live config for it under --prefix, "
    "or when TIDEGATE_<NAME>_RATE/_BURST/_CONCURRENCY/_LEASE_S configures it in this shell."
)


def _fleet_gate(client: redis.Redis, name: str, prefix: str) -> Gate:
    """The gate as the fleet sees it: built-in defaults, never this shell's environment."""
    return Gate(client, name, policy=GatePolicy(), prefix=prefix)


def _configured_here(name: str) -> bool:
    stem = f"TIDEGATE_{name.upper().replace('-', '_').replace('.', '_')}_"
    return any(os.environ.get(stem + field, "").strip() for field in _ENV_FIELDS)


def _existing(client: redis.Redis, name: str, prefix: str, *, create: bool = False) -> Gate:
    """The gate ``name``, or a clear refusal naming the known gates."""
    found = _fleet_gate(client, name, prefix)
    if create or found.in_use() or _configured_here(name):
        return found
    known = fleet_gate_names(client, prefix=prefix)
    listed = ", ".join(known) if known else "none"
    raise TidegateCLIError(
        f"no gate {name!r} under prefix {prefix!r} (gates with state: {listed}); "
        "check the name and --prefix, or see `tidegate gate ls`"
    )


def _sources(state: GateState) -> dict[str, str]:
    live = set(state.overridden)
    return {field: _LIVE if field in live else _DEFAULT for field in _FLAGS}


def _as_json(
    state: GateState, prefix: str, adaptive: dict[str, Any] | None = None
) -> dict[str, Any]:
    shown = {**state.as_dict(), "prefix": prefix, "sources": _sources(state)}
    return shown if adaptive is None else {**shown, "adaptive": adaptive}


def _show_adaptive(name: str, adaptive: dict[str, Any]) -> None:
    """The controller's learned values and its latest changes, newest first."""
    table = Table(title=f"adaptive controller of {name}")
    for column in ("field", "value"):
        table.add_column(column)
    overrides = adaptive["overrides"]
    table.add_row("mode", overrides.get("mode", "as configured on the workers"))
    for field in ("learned_rate", "ceiling", "learned_concurrency", "controller"):
        value = adaptive[field]
        table.add_row(field.replace("_", " "), "-" if value is None else str(value))
    live = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()) if k != "mode")
    table.add_row("live overrides", live or "-")
    print_table(console(), table)
    history = Table(title=f"latest changes ({len(adaptive['history'])})")
    for column in ("at", "kind", "reason", "from", "to", "ceiling"):
        history.add_column(column)
    for event in adaptive["history"]:
        kind = event.get("kind", "")
        before = event.get("previous_rate" if kind == "rate" else "previous_concurrency")
        after = event.get("rate" if kind == "rate" else "concurrency")
        history.add_row(
            str(event.get("at_ms", "")),
            str(kind),
            str(event.get("reason", "")),
            str(before),
            str(after),
            str(event.get("ceiling", "-")),
        )
    print_table(console(), history)


def _show(state: GateState, prefix: str) -> None:
    table = Table(title=f"gate {state.name} (prefix {prefix})")
    for column in ("field", "value", "source"):
        table.add_column(column)
    sources = _sources(state)
    for field, flag in _FLAGS.items():
        if field in state.invalid:
            table.add_row(
                field,
                repr(state.invalid[field]),
                f"live, INVALID: not a usable value; replace it with gate set {flag}",
            )
        else:
            table.add_row(field, str(getattr(state.policy, field)), sources[field])
    paused = f"{state.paused_for_s:.1f}s ({state.pause_reason})" if state.paused_for_s else "no"
    table.add_row("paused", paused, "live")
    table.add_row("leases held", str(state.leases_held), "live")
    table.add_row("tokens available", str(state.tokens_available), "live")
    print_table(console(), table)


def _output_options(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        func
    )


@click.group(help=f"List, show and retune the fleet-wide gates of the downstreams. {_EXISTS_HELP}")
def gate() -> None:
    pass


@gate.command(name="ls")
@_output_options
@connection_options
def ls(as_json: bool, redis_url: str | None, prefix: str) -> None:
    """List the gates the fleet holds state or live config for under --prefix.

    A gate configured only by the workers' environment and idle since its keys expired
    is not listed: nothing in Redis says it exists.
    """
    with redis_client(redis_url) as client:
        states = [
            _fleet_gate(client, name, prefix).state()
            for name in fleet_gate_names(client, prefix=prefix)
        ]
    if as_json:
        echo_json([_as_json(state, prefix) for state in states])
        return
    table = Table(title=f"gates under prefix {prefix} ({len(states)})")
    for column in ("name", *_FLAGS, "live values", "paused", "leases held"):
        table.add_column(column)
    for state in states:
        table.add_row(
            state.name,
            *(
                repr(state.invalid[f]) if f in state.invalid else str(getattr(state.policy, f))
                for f in _FLAGS
            ),
            ", ".join(state.overridden) or "-",
            f"{state.paused_for_s:.1f}s" if state.paused_for_s else "no",
            str(state.leases_held),
        )
    print_table(console(), table)


@gate.command()
@click.argument("name")
@_output_options
@connection_options
def show(name: str, as_json: bool, redis_url: str | None, prefix: str) -> None:
    """Show the rate, burst, concurrency and lease NAME's fleet uses, and where each comes
    from: "live (set by gate set)" is in Redis for every worker; "default" is tidegate's
    built-in value, which a worker's own TIDEGATE_<NAME>_* settings may replace."""
    with redis_client(redis_url) as client:
        state = _existing(client, name, prefix).state()
        adaptive = adaptive_report(client, name, prefix)
    if as_json:
        echo_json(_as_json(state, prefix, adaptive))
    else:
        _show(state, prefix)
        _show_adaptive(name, adaptive)


@gate.command(name="set")
@click.argument("name")
@click.option(
    "--rate",
    type=FiniteFloat(min=MIN_RATE, max=MAX_RATE),
    help="Sustained admissions per second, fleet-wide.",
)
@click.option(
    "--burst",
    type=click.IntRange(1, MAX_BURST),
    help="Admissions allowed back to back.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(0, MAX_CONCURRENCY),
    help="Calls in flight fleet-wide; 0 removes the cap (asks for --yes).",
)
@click.option(
    "--lease-s",
    type=FiniteFloat(min=MIN_LEASE_S, max=MAX_LEASE_S),
    help="Seconds a crashed holder keeps its slot.",
)
@click.option(
    "--adaptive",
    type=click.Choice(["on", "off", "freeze"]),
    help="The adaptive controller, fleet-wide: learn (on), hold the learned values "
    "(freeze), or leave the gate to its set values (off).",
)
@click.option(
    "--min-rate", type=FiniteFloat(min=MIN_RATE, max=MAX_RATE), help="Adaptive: the floor."
)
@click.option(
    "--max-rate", type=FiniteFloat(min=MIN_RATE, max=MAX_RATE), help="Adaptive: the maximum."
)
@click.option(
    "--min-concurrency", type=click.IntRange(1, MAX_CONCURRENCY), help="Adaptive: the floor."
)
@click.option(
    "--max-concurrency", type=click.IntRange(1, MAX_CONCURRENCY), help="Adaptive: the maximum."
)
@click.option(
    "--suspension-prone/--no-suspension-prone",
    default=None,
    help="Adaptive: keep a ceiling just under the rate of the last 429.",
)
@click.option("--yes", is_flag=True, help="Confirm a change that removes a protection.")
@click.option("--create", is_flag=True, help="Set a gate the fleet holds no state for yet.")
@_output_options
@connection_options
def set_(
    name: str,
    rate: float | None,
    burst: int | None,
    concurrency: int | None,
    lease_s: float | None,
    adaptive: str | None,
    min_rate: float | None,
    max_rate: float | None,
    min_concurrency: int | None,
    max_concurrency: int | None,
    suspension_prone: bool | None,
    yes: bool,
    create: bool,
    as_json: bool,
    redis_url: str | None,
    prefix: str,
) -> None:
    """Retune NAME for the whole running fleet (no restart); values are checked first.

    While the adaptive controller is on it owns the rate and the concurrency: set
    --adaptive freeze (or off) before setting them by hand.
    """
    if concurrency == 0 and not yes:
        raise TidegateCLIError(
            "--concurrency 0 removes the concurrency cap for the whole fleet; repeat with --yes"
        )
    adaptive_values = {
        "mode": adaptive,
        "min_rate": min_rate,
        "max_rate": max_rate,
        "min_concurrency": min_concurrency,
        "max_concurrency": max_concurrency,
        "suspension_prone": suspension_prone,
    }
    with redis_client(redis_url) as client:
        target = _existing(client, name, prefix, create=create)
        try:
            write_adaptive(client, name, prefix, adaptive_values, check=True)
        except ConfigurationError as exc:
            raise bad_option(exc, ADAPTIVE_FLAGS) from exc
        retune = (rate, burst, concurrency, lease_s) != (None, None, None, None)
        try:
            if retune or all(value is None for value in adaptive_values.values()):
                state = target.configure(
                    rate=rate, burst=burst, concurrency=concurrency, lease_s=lease_s
                )
            else:
                state = target.state()
        except ConfigurationError as exc:
            raise bad_option(exc, _FLAGS) from exc
        write_adaptive(client, name, prefix, adaptive_values)
        learned = adaptive_report(client, name, prefix)
    if as_json:
        echo_json(_as_json(state, prefix, learned))
    else:
        _show(state, prefix)
        _show_adaptive(name, learned)


@gate.command()
@click.argument("name")
@click.argument("seconds", type=FiniteFloat(min=0, min_open=True, max=MAX_PAUSE_S))
@click.option("--reason", default="operator", show_default=True, help="Recorded with the pause.")
@click.option("--create", is_flag=True, help="Pause a gate the fleet holds no state for yet.")
@connection_options
def pause(
    name: str, seconds: float, reason: str, create: bool, redis_url: str | None, prefix: str
) -> None:
    """Stop every admission to NAME fleet-wide for SECONDS (at most a week).

    A pause is only ever extended, never shortened; `tidegate gate resume` ends it.
    """
    with redis_client(redis_url) as client:
        target = _existing(client, name, prefix, create=create)
        try:
            remaining = target.pause(seconds, reason)
        except ConfigurationError as exc:
            raise bad_option(exc, {"pause seconds": "SECONDS"}) from exc
    click.echo(f"gate {name} paused for {remaining:.1f}s ({reason})")


@gate.command()
@click.argument("name")
@connection_options
def resume(name: str, redis_url: str | None, prefix: str) -> None:
    """End a pause of NAME now."""
    with redis_client(redis_url) as client:
        target = _existing(client, name, prefix)
        was = target.state().paused_for_s
        if not was:
            click.echo(f"gate {name} was not paused")
            return
        target.resume()
    click.echo(f"gate {name} resumed (the pause had {was:.1f}s left)")
