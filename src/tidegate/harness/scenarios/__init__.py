"""The demonstration scenarios of ``tidegate demo``: one module per scenario.

The rule of this package: a scenario module holds one scenario's configuration, run
and report, and nothing another scenario needs (shared parts live one level up in
:mod:`tidegate.harness`). A scenario that is a variant of another (adaptive, console,
RQ) reuses the other's run rather than copying it.
"""

from __future__ import annotations

__all__: list[str] = []
