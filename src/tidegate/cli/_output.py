"""Where every command's human output goes: one console, decorated only at a terminal.

At a terminal an operator gets colour and tables fitted to the window. Anywhere else (a
pipe, a file, ``make`` in CI, a script reading the output) a line is never wrapped, never
coloured and a table has no box: what a command prints must not depend on the width of a
terminal that is not there, nor on the length of the folder it runs in.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console
from rich.table import Table

__all__ = ["console", "is_terminal", "print_table"]

#: The width given to a console that writes to a pipe or a file: wide enough that no
#: line rich renders is ever wrapped (rich needs some finite width).
_UNBOUNDED_WIDTH = 100_000


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stdout) is an interactive terminal."""
    target = sys.stdout if stream is None else stream
    isatty = getattr(target, "isatty", None)
    return bool(isatty and isatty())


def console(stream: TextIO | None = None) -> Console:
    """A rich console on ``stream`` (default stdout), plain when it is not a terminal."""
    target = sys.stdout if stream is None else stream
    if is_terminal(target):
        return Console(file=target, highlight=False)
    return Console(
        file=target,
        highlight=False,
        width=_UNBOUNDED_WIDTH,
        no_color=True,
        color_system=None,
        emoji=False,
        soft_wrap=True,
        force_terminal=False,
        force_interactive=False,
    )


def print_table(out: Console, table: Table) -> None:
    """Print ``table``: boxed at a terminal; plain aligned columns elsewhere."""
    if not out.is_terminal:
        table.box = None
        table.show_edge = False
        table.title_justify = "left"
        for column in table.columns:
            # "fold", not "ignore": rich drops a column's justification on "ignore" (figures
            # would no longer line up); nothing is this wide, so nothing folds.
            column.overflow = "fold"
            column.no_wrap = True
    out.print(table)
