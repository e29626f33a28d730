"""Delivery of one unit to its downstream, the same for every engine.

- :mod:`~tidegate.delivery.verdict` — what a failure means (park, dead-letter,
  requeue, retry in place) and the horizon; pure;
- :mod:`~tidegate.delivery.unit` — a unit's identity: its key, its dead letter;
- :mod:`~tidegate.delivery.lifecycle` — the whole lifecycle as a sans-I/O generator of
  :mod:`~tidegate.delivery.steps`;
- :mod:`~tidegate.delivery.driver` — runs it against an :class:`Engine` (Celery, RQ,
  in-memory) and the shared :class:`Stores`.
"""

from __future__ import annotations

from tidegate.delivery.driver import Engine, Stores, deliver
from tidegate.delivery.lifecycle import (
    AWAITING_COMMIT,
    LifecyclePolicy,
    Requeue,
    commit_wait_s,
    doubt,
    lifecycle,
    may_have_reached,
)
from tidegate.delivery.unit import (
    Unit,
    check_required_fields,
    dead_letter_for,
    max_request_s_for,
    unit_key,
)
from tidegate.delivery.verdict import (
    Action,
    RetryPolicy,
    Verdict,
    fleet_now_s,
    judge,
    judge_now,
    verdict_for,
)

__all__ = [
    "AWAITING_COMMIT",
    "Action",
    "Engine",
    "LifecyclePolicy",
    "Requeue",
    "RetryPolicy",
    "Stores",
    "Unit",
    "Verdict",
    "check_required_fields",
    "commit_wait_s",
    "dead_letter_for",
    "deliver",
    "doubt",
    "fleet_now_s",
    "judge",
    "judge_now",
    "lifecycle",
    "max_request_s_for",
    "may_have_reached",
    "unit_key",
    "verdict_for",
]
