"""The memory twin of ``lease_claim.lua``, shared by the parking lot and the quarantine.

Scores are kept as Redis keeps them: the script writes times as ``"%.3f"`` strings,
so :func:`stamp` rounds the same way, and ties in line order fall to the member name
(a sorted set orders equal scores lexicographically), which ``sorted`` on
``(score, member)`` reproduces.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Literal

__all__ = ["lease_claim", "stamp"]


def stamp(ms: float) -> float:
    """``ms`` as a score the scripts would have written (``"%.3f"``, read back)."""
    return float(f"{ms:.3f}")


def lease_claim(
    waiting: MutableMapping[str, float],
    inflight: MutableMapping[str, float],
    bodies: Mapping[str, str],
    home: Mapping[str, float] | None,
    *,
    now_ms: float,
    limit: int,
    lease_ms: float,
    pick: Literal["due", "oldest"],
) -> tuple[int, list[tuple[str, str, float]]]:
    """Hand the oldest waiting members to one claimer; the caller holds the lock.

    Returns ``(held, claimed)``: members another claimer still holds after expired
    leases went back in line (to ``home``'s place, or due now without ``home``; a
    member without a home entry is dropped, as the script does), and the claimed
    ``(member, body, home place or 0)``, oldest first. A member without a body leaves
    the line and is not claimed.
    """
    now = stamp(now_ms)
    for member, until in list(inflight.items()):
        if until <= now:
            del inflight[member]
            if home is None:
                waiting[member] = now
            elif member in home:
                waiting[member] = home[member]
    held = len(inflight)
    line = sorted((score, member) for member, score in waiting.items())
    if pick == "due":
        line = [entry for entry in line if entry[0] <= now]
    chosen = line if limit < 0 and pick == "due" else line[: max(0, limit)]
    lease_until = stamp(now + lease_ms)
    claimed = []
    for _, member in chosen:
        del waiting[member]
        body = bodies.get(member)
        if body is not None:
            inflight[member] = lease_until
            claimed.append((member, body, home.get(member, 0.0) if home is not None else 0.0))
    return held, claimed
