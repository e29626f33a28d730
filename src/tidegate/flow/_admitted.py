"""When the call running in this context was admitted by its gate (fleet clock, ms).

The adaptive controller has to tell a 429 that says something about the rate now from
the echo of a cut it already made: a call the gate admitted before the cut was spaced
at the old rate, and its 429 arrives after the cut. Only the gate knows when a call
was admitted, and only the downstream client sees the 429; between them sits the
application's own code (``with gate.slot(): client.send(...)``). So the slot keeps the
admission time in a context variable for as long as it is held, per gate name (a unit
may hold two gates' slots at once), and the observer reads it where the answer is
reported. Works across threads (each has its own context) and asyncio tasks alike.

The slot also says whether the call waited for its admission: a call that waited was
held back by the gate, so the gate's rate — not demand — set the pace, and the rate
the fleet measured in that window (deflated by any pause) is not the rate a 429 met.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType

__all__ = ["admitted_ms", "holding", "waited"]

_EMPTY: Mapping[str, tuple[float, float]] = MappingProxyType({})
_ADMITTED: ContextVar[Mapping[str, tuple[float, float]]] = ContextVar(
    "tidegate_admitted", default=_EMPTY
)


def admitted_ms(name: str) -> float | None:
    """When the slot of gate ``name`` held in this context was admitted; ``None``
    outside one (or for a fail-open admission, which no gate decided)."""
    held = _ADMITTED.get().get(name)
    return None if held is None else held[0]


def waited(name: str) -> bool | None:
    """Whether the slot of gate ``name`` held in this context had to wait for its
    admission (a token or a pause); ``None`` outside one."""
    held = _ADMITTED.get().get(name)
    return None if held is None else held[1] > 0


@contextlib.contextmanager
def holding(name: str, at_ms: float | None, waited_s: float = 0.0) -> Iterator[None]:
    """Make ``at_ms`` the admission time of gate ``name`` for the block, after a wait
    of ``waited_s`` seconds."""
    if at_ms is None:
        yield
        return
    token = _ADMITTED.set(MappingProxyType({**_ADMITTED.get(), name: (at_ms, waited_s)}))
    try:
        yield
    finally:
        _ADMITTED.reset(token)
