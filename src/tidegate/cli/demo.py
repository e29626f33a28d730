"""``tidegate demo``: placeholder until the gate demo lands."""

from __future__ import annotations

import click

__all__ = ["demo"]


@click.command()
def demo() -> None:
    """Run the vessel-burst demonstration."""
    raise click.ClickException("the demo is being built")
