"""A fault point for crash tests: die at a named step of the intake, like a power cut would.

``TIDEGATE_INTAKE_FAULT=<point>`` (read once, when the intake starts) makes the process
kill itself with ``SIGKILL`` the first time it reaches that point — no ``finally``, no
flush, no answer — so a test can prove what a crash there leaves behind. Points:

``after_publish``
    every unit of an interchange is on the broker; the duplicate window still holds
    only this request's claim (it expires after its lease, then a retry publishes
    again and the units' idempotency keys keep the downstream exactly-once).
``before_ack``
    the interchange is recorded as accepted; the CONTRL / HTTP answer, or the move of
    a dropped file to ``done/``, has not happened. The retry is a duplicate (409, code
    26) and nothing is published twice.

Unset (the default), a fault point costs one attribute read.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping

from tidegate.errors import ConfigurationError

__all__ = ["FAULT_ENV", "FAULT_POINTS", "NO_FAULT", "FaultPoint"]

#: The environment variable naming the point to die at.
FAULT_ENV = "TIDEGATE_INTAKE_FAULT"
#: The points the intake passes through.
FAULT_POINTS = frozenset({"after_publish", "before_ack"})


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class FaultPoint:
    """Dies (runs ``action``) at ``point``; a no-op without one.

    Args:
        point: one of :data:`FAULT_POINTS`, or ``None``.
        action: what dying means (``SIGKILL`` to this process; tests pass a raise).

    Raises:
        ConfigurationError: an unknown point (a typo must not silently test nothing).
    """

    def __init__(self, point: str | None = None, *, action: Callable[[], None] = _kill_self):
        if point is not None and point not in FAULT_POINTS:
            raise ConfigurationError(
                f"{FAULT_ENV}={point!r} is not a fault point; known: {sorted(FAULT_POINTS)}"
            )
        self.point = point
        self._action = action

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> FaultPoint:
        """The point named by :data:`FAULT_ENV` (unset or empty: none)."""
        return cls(environ.get(FAULT_ENV) or None)

    def reached(self, point: str) -> None:
        """Die here if this is the configured point."""
        if self.point == point:
            self._action()


#: No fault point.
NO_FAULT = FaultPoint()
