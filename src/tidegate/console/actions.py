"""Operator actions, each checked, carried out through the fleet's own APIs and audited.

Pause, resume and retune go through :class:`~tidegate.flow.Gate`, a replay through
:func:`~tidegate.load.replay.replay_dead_letters`, a replay of the quarantine through
the intake's :meth:`~tidegate.load.admission.Admission.replay`: the console adds no
second way of writing the keyspace. Every action, done or refused, is one ``console_action`` event
naming who, what and the outcome — never a payload or a key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from tidegate.console.access import User
from tidegate.console.errors import BadAction, ConsoleError
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate, RateLimiter
from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.load.quarantine import Quarantine
from tidegate.load.replay import replay_dead_letters
from tidegate.logging import get_logger
from tidegate.settings import MAX_PAUSE_S

__all__ = [
    "MAX_REPLAY_LIMIT",
    "MAX_REPLAY_S",
    "Actions",
    "Outcome",
    "Publish",
    "ReplayQuarantine",
]

log = get_logger("tidegate.console")

#: Most dead letters one replay from the page republishes.
MAX_REPLAY_LIMIT = 1000
#: Longest a replay from the page may take at its chosen rate: the request waits for it.
MAX_REPLAY_S = 60.0
#: Fastest replay rate, per second, as ``tidegate dlq replay --rate`` allows.
MAX_REPLAY_RATE = 1000.0

#: Sends one dead letter's task back to its queue (the integration's job).
Publish = Callable[[DeadLetter], None]
#: Replays up to ``limit`` quarantined documents of ``queue`` through the intake
#: (``force``: even while the queue is still overloaded); returns an
#: :class:`~tidegate.load.admission.ReplayReport`.
ReplayQuarantine = Callable[[str, int, bool], Any]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an action did, for the page and the audit event."""

    action: str
    summary: str
    details: Mapping[str, Any]


def _number(form: Mapping[str, str], field: str, *, integer: bool = False) -> float | None:
    raw = form.get(field, "").strip()
    if not raw:
        return None
    try:
        value = float(int(raw)) if integer else float(raw)
    except ValueError:
        raise BadAction(f"{field} must be a {'whole ' if integer else ''}number") from None
    if not math.isfinite(value):
        raise BadAction(f"{field} must be a finite number")
    return value


def _required(form: Mapping[str, str], field: str, *, integer: bool = False) -> float:
    value = _number(form, field, integer=integer)
    if value is None:
        raise BadAction(f"{field} is required")
    return value


class Actions:
    """The actions of one console.

    Args:
        client: a sync Redis client.
        prefix: tidegate's key prefix.
        publish: republishes a dead letter; ``None`` disables replay (the page says so).
        replay_quarantine: gives quarantined documents back to the intake; ``None``
            disables that replay.
        gates: the gates the console shows; an action names one of them or is refused,
            so a typo never creates the keys of a gate nobody uses.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        publish: Publish | None = None,
        replay_quarantine: ReplayQuarantine | None = None,
        gates: Callable[[], Sequence[str]] = tuple,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.publish = publish
        self.replay_quarantine = replay_quarantine
        self._gates = gates

    def authorize(self, user: User, action: str, target: str) -> None:
        """Refuse (and audit the refusal) unless ``user`` may do ``action`` at all.

        Raises:
            Forbidden: ``user`` is not an operator.
            BadAction: no such action.
        """
        try:
            user.require_operator()
            if action not in _HANDLERS:
                raise BadAction(f"unknown action {action!r}")
        except ConsoleError as exc:
            self.audit(user, action, target, "refused", {"error": type(exc).__name__})
            raise

    def run(self, user: User, action: str, target: str, form: Mapping[str, str]) -> Outcome:
        """Carry out ``action`` on ``target`` for ``user`` and audit it.

        Raises:
            Forbidden: ``user`` is not an operator.
            BadAction: unknown action, or a value missing or out of range; nothing
                is written.
        """
        try:
            user.require_operator()
            handler = _HANDLERS.get(action)
            if handler is None:
                raise BadAction(f"unknown action {action!r}")
            outcome = handler(self, target, form)
        except (BadAction, ConfigurationError) as exc:
            self.audit(user, action, target, "refused", {"error": type(exc).__name__})
            if isinstance(exc, BadAction):
                raise
            raise BadAction(str(exc)) from exc
        except Exception as exc:
            self.audit(user, action, target, "refused", {"error": type(exc).__name__})
            raise
        self.audit(user, action, target, "done", outcome.details)
        return outcome

    @staticmethod
    def audit(
        user: User, action: str, target: str, result: str, details: Mapping[str, Any]
    ) -> None:
        """One ``console_action`` event: who, what, on which target, and the outcome."""
        log.warning(
            "console_action",
            user=user.name,
            role=user.role.value,
            action=action,
            target=target,
            result=result,
            **details,
        )

    def _gate(self, name: str) -> Gate:
        if name not in self._gates():
            raise BadAction(f"no downstream gate {name!r} on this console")
        return Gate(self.client, name, prefix=self.prefix)

    def pause(self, target: str, form: Mapping[str, str]) -> Outcome:
        seconds = _required(form, "seconds")
        if not 0 < seconds <= MAX_PAUSE_S:
            raise BadAction(f"seconds must be in (0, {MAX_PAUSE_S:g}]")
        reason = form.get("reason", "").strip()[:80] or "operator"
        left = self._gate(target).pause(seconds, f"console: {reason}")
        return Outcome(
            "pause",
            f"paused for {left:.0f} s",
            {"pause_s": seconds, "reason": reason, "paused_for_s": round(left, 3)},
        )

    def resume(self, target: str, form: Mapping[str, str]) -> Outcome:
        self._gate(target).resume()
        return Outcome("resume", "resumed", {})

    def retune(self, target: str, form: Mapping[str, str]) -> Outcome:
        rate = _number(form, "rate")
        burst = _number(form, "burst", integer=True)
        concurrency = _number(form, "concurrency", integer=True)
        state = self._gate(target).configure(
            rate=rate,
            burst=None if burst is None else int(burst),
            concurrency=None if concurrency is None else int(concurrency),
        )
        details = {
            "rate": state.policy.rate,
            "burst": state.policy.burst,
            "concurrency": state.policy.concurrency,
        }
        return Outcome(
            "retune", f"now {state.policy.rate:g}/s, burst {state.policy.burst}", details
        )

    def replay(self, target: str, form: Mapping[str, str]) -> Outcome:
        if self.publish is None:
            raise BadAction("replay is off: the console was started without a broker")
        rate = _required(form, "rate")
        limit = int(_required(form, "limit", integer=True))
        if not 0 < rate <= MAX_REPLAY_RATE:
            raise BadAction(f"rate must be in (0, {MAX_REPLAY_RATE:g}] per second")
        if not 1 <= limit <= MAX_REPLAY_LIMIT:
            raise BadAction(f"limit must be in [1, {MAX_REPLAY_LIMIT}]")
        burst = max(1, int(rate))
        if (limit - burst) / rate > MAX_REPLAY_S:
            raise BadAction(
                f"{limit} letters at {rate:g}/s take longer than {MAX_REPLAY_S:g} s; "
                "raise the rate or replay fewer"
            )
        pace = RateLimiter(self.client, "dlq-replay", rate=rate, burst=burst, prefix=self.prefix)
        result = replay_dead_letters(
            DeadLetterQueue(self.client, prefix=self.prefix),
            self.publish,
            limit=limit,
            reason=target or None,
            pace=pace,
        )
        return Outcome(
            "replay",
            f"replayed {result.published}, skipped {result.skipped} already in replay",
            {
                "reason_filter": target,
                "rate": rate,
                "limit": limit,
                "published": result.published,
                "skipped": result.skipped,
            },
        )

    def release(self, target: str, form: Mapping[str, str]) -> Outcome:
        """Replay quarantined documents of queue ``target`` through the intake."""
        if self.replay_quarantine is None:
            raise BadAction("replaying the quarantine is off: the console has no broker")
        if target not in Quarantine(self.client, prefix=self.prefix).queues():
            raise BadAction(f"no quarantined documents for queue {target!r}")
        limit = int(_required(form, "limit", integer=True))
        if not 1 <= limit <= MAX_REPLAY_LIMIT:
            raise BadAction(f"limit must be in [1, {MAX_REPLAY_LIMIT}]")
        force = form.get("force") == "yes"
        report = self.replay_quarantine(target, limit, force)
        return Outcome(
            "replay-quarantine",
            f"replayed {report.replayed}, put back {report.released} "
            f"(queue still overloaded), skipped {report.skipped} already in replay",
            {
                "queue": target,
                "limit": limit,
                "force": force,
                "replayed": report.replayed,
                "released": report.released,
                "skipped": report.skipped,
                "by_class": dict(report.by_class),
            },
        )


_HANDLERS: Mapping[str, Callable[[Actions, str, Mapping[str, str]], Outcome]] = {
    "pause": Actions.pause,
    "resume": Actions.resume,
    "retune": Actions.retune,
    "replay": Actions.replay,
    "replay-quarantine": Actions.release,
}

#: Actions that stop work or change capacity: the page asks before doing them.
CONFIRMED = frozenset({"pause", "resume", "retune", "replay", "replay-quarantine"})
