"""The ``tidegate`` command: one click group, one module per sub-command group.

Each sub-module defines a click group or command and is registered here, so adding a
command never means editing another command's module.
"""

from __future__ import annotations

import click

from tidegate import __version__
from tidegate.cli._common import TidegateCLIError

__all__ = ["TidegateCLIError", "cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tidegate")
def cli() -> None:
    """Flow control between a Celery/RQ fleet and slow downstreams."""


def _register() -> None:
    from tidegate.cli.demo import demo
    from tidegate.cli.edi import edi
    from tidegate.cli.gate import gate

    cli.add_command(gate)
    cli.add_command(edi)
    cli.add_command(demo)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(auto_envvar_prefix="TIDEGATE")
