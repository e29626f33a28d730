"""``tidegate edi``: inspect and split EDIFACT files (built in the EDIFACT intake issue)."""

from __future__ import annotations

import click

__all__ = ["edi"]


@click.group()
def edi() -> None:
    """Read EDIFACT interchanges: inspect, split manifests per Bill of Lading."""
