"""One reconciliation for every report: an outcome per submitted key, from the records.

A report that computes ``lost = submitted - delivered - dead - pending`` can hide a loss
behind a duplicate (one key delivered twice, another never) and can never say *which*
document is missing. Every demo, benchmark and chaos report is computed here instead,
from what each party itself recorded:

- the simulated downstreams' own record of the keys they accepted (and how often);
- the dead-letter queue, the quarantine, and the intake's refusals;
- what is still in the broker's queues, in ``unacked`` or parked, read at the end.

Each submitted key gets exactly one outcome, in this order of precedence: ``delivered``
(the downstream has it), ``dead_lettered``, ``quarantined``, ``refused``, ``pending``
(still on its way) — and ``lost`` when none of the records knows it. A key accepted more
than once is ``accepted_twice`` as well; a key the downstream accepted that nobody
submitted is ``unexpected``.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidegate.delivery import unit_key

__all__ = ["OUTCOMES", "Reconciliation", "keys_in_messages", "reconcile"]

#: Every outcome a key can have, in order of precedence.
OUTCOMES = ("delivered", "dead_lettered", "quarantined", "refused", "pending", "lost")


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The outcome of every submitted key, and the anomalies found on the way."""

    outcome: dict[str, str]
    accepted_twice: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    delivered_and_dead_lettered: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        """How many keys ended with ``outcome``."""
        return sum(1 for value in self.outcome.values() if value == outcome)

    def keys(self, outcome: str) -> list[str]:
        """The keys that ended with ``outcome``, sorted."""
        return sorted(key for key, value in self.outcome.items() if value == outcome)

    def counts(self) -> dict[str, int]:
        """Every outcome's count (the report's ``delivered``, ``lost``, … fields)."""
        tally = Counter(self.outcome.values())
        return {outcome: tally.get(outcome, 0) for outcome in OUTCOMES}

    def report_fields(self) -> dict[str, int | list[str]]:
        """The outcome part of a vessel burst's report, the same for every engine and
        broker: counts per outcome, the first lost keys, and the anomalies."""
        counts = self.counts()
        return {
            "submitted": len(self.outcome),
            "delivered": counts["delivered"],
            "dead_lettered": counts["dead_lettered"],
            "quarantined": counts["quarantined"],
            "refused_at_intake": counts["refused"],
            "pending": counts["pending"],
            "lost": counts["lost"],
            "lost_keys": self.keys("lost")[:20],
            "accepted_twice": len(self.accepted_twice),
            "unexpected_accepts": len(self.unexpected),
        }


def reconcile(
    submitted: Iterable[str],
    *,
    accepted: Mapping[str, int],
    dead_lettered: Iterable[str] = (),
    quarantined: Iterable[str] = (),
    refused: Iterable[str] = (),
    pending: Iterable[str] = (),
) -> Reconciliation:
    """Give each submitted key its one outcome (see the module docstring).

    Args:
        submitted: every key the run submitted (a key submitted twice counts once).
        accepted: key → how many times the downstreams accepted it (their own record).
        dead_lettered / quarantined / refused / pending: the keys each record holds.
    """
    dead, held, turned_away, waiting = (
        set(dead_lettered),
        set(quarantined),
        set(refused),
        set(pending),
    )
    keys = list(dict.fromkeys(submitted))
    outcome: dict[str, str] = {}
    for key in keys:
        if accepted.get(key, 0) > 0:
            outcome[key] = "delivered"
        elif key in dead:
            outcome[key] = "dead_lettered"
        elif key in held:
            outcome[key] = "quarantined"
        elif key in turned_away:
            outcome[key] = "refused"
        elif key in waiting:
            outcome[key] = "pending"
        else:
            outcome[key] = "lost"
    known = set(keys)
    return Reconciliation(
        outcome=outcome,
        accepted_twice=sorted(k for k, n in accepted.items() if n > 1),
        unexpected=sorted(k for k in accepted if k not in known),
        delivered_and_dead_lettered=sorted(k for k in dead if accepted.get(k, 0) > 0),
    )


def keys_in_messages(raws: Iterable[bytes | str]) -> list[str]:
    """The unit keys carried by kombu messages as stored in a Redis broker's lists (or
    ``unacked`` entries, ``[message, exchange, routing_key]``): the envelope's ``"key"``
    or an ``idempotency_key`` keyword. Messages that carry none are skipped."""
    keys = []
    for raw in raws:
        try:
            message: Any = json.loads(raw)
            if isinstance(message, list):
                message = message[0]
            body = message["body"]
            if message.get("properties", {}).get("body_encoding") == "base64":
                body = base64.b64decode(body)
            args, kwargs = json.loads(body)[:2]
        except (ValueError, KeyError, TypeError, IndexError):
            continue
        key = unit_key(args, kwargs)
        if key is not None:
            keys.append(key)
    return keys
