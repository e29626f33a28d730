"""``tidegate gate``: placeholder."""

from __future__ import annotations

import click

__all__ = ["gate"]


@click.group()
def gate() -> None:
    """Show and retune the fleet-wide gate of a downstream."""
