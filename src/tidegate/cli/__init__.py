"""The ``tidegate`` command: one click group, one module per sub-command group.

Each sub-module defines a click group or command and is registered here, so adding a
command never means editing another command's module.

One output convention for every command: what the operator asked for (a table, or JSON
with ``--json``) goes to stdout and nothing else does; decision events (a retune, a
pause, a purge) are JSON log lines on the log stream — stderr, or the file given with
``--log-file`` — so a terminal shows the table alone and a script can parse stdout.
"""

from __future__ import annotations

import sys
from typing import TextIO

import click

from tidegate import __version__
from tidegate.cli._common import TidegateCLIError
from tidegate.logging import configure as configure_logging

__all__ = ["TidegateCLIError", "cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tidegate")
@click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    envvar="TIDEGATE_LOG_LEVEL",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Decision events (JSON lines) at or above this level go to the log stream.",
)
@click.option(
    "--log-file",
    type=click.File("a", encoding="utf-8", lazy=False),
    envvar="TIDEGATE_LOG_FILE",
    show_envvar=True,
    default=None,
    help="Append decision events here instead of stderr (an audit trail off the terminal).",
)
def cli(log_level: str, log_file: TextIO | None) -> None:
    """Flow control between a Celery/RQ fleet and slow downstreams."""
    configure_logging(level=log_level, stream=log_file if log_file is not None else sys.stderr)


def _register() -> None:
    from tidegate.cli.console import console
    from tidegate.cli.demo import demo
    from tidegate.cli.dlq import dlq
    from tidegate.cli.edi import edi
    from tidegate.cli.gate import gate
    from tidegate.cli.intake import intake
    from tidegate.cli.monitor import metrics, monitor, watermarks
    from tidegate.cli.quarantine import quarantine
    from tidegate.cli.relay import relay

    cli.add_command(gate)
    cli.add_command(edi)
    cli.add_command(dlq)
    cli.add_command(quarantine)
    cli.add_command(monitor)
    cli.add_command(metrics)
    cli.add_command(watermarks)
    cli.add_command(demo)
    cli.add_command(intake)
    cli.add_command(console)
    cli.add_command(relay)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(auto_envvar_prefix="TIDEGATE")
