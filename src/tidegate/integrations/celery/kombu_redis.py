"""kombu's private Redis layout, written down once.

kombu's Redis transport (``kombu/transport/redis.py``) keeps a queue in several Redis
structures that are not part of any public API; the depth probe, the orphan sweep and
publish tracking all have to find them, and each used to rebuild them on its own.

- **priority sub-queues.** A message of priority *p* (clamped to 0..9, 0 when absent)
  goes to the list of the largest priority step <= *p* (default steps
  ``[0, 3, 6, 9]``): step 0 is the list named like the queue, step *s* is
  ``queue + "\\x06\\x16" + str(s)`` (``edi.customs\\x06\\x163`` …). The separator
  and the steps are the channel's ``sep`` / ``priority_steps``; the latter is a
  transport option.
- **reserved, not acknowledged.** With ``acks_late``, a message is in the ``unacked``
  hash (transport option ``unacked_key``) from delivery until the task finishes:
  delivery tag → JSON ``[message, exchange, routing_key]`` (and in the
  ``unacked_index`` zset, by time).
- **bindings.** A named exchange routes through the set ``_kombu.binding.<exchange>``,
  members ``routing_key, pattern, queue`` joined by the separator.
- **global_keyprefix** (transport option) is put in front of every one of these keys.

A *lane* is one such list without the global prefix: what the orphan sweep indexes
units by (:mod:`tidegate.integrations.celery.sweep_index`).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidegate._redis import text
from tidegate.errors import ConfigurationError

__all__ = ["KOMBU_PRIORITY_STEPS", "KOMBU_SEP", "KombuRedisLayout", "lane_of"]

#: kombu's Redis transport: separator between a queue name and its priority step.
KOMBU_SEP = "\x06\x16"
#: kombu's Redis transport: the default priority steps (one list per step).
KOMBU_PRIORITY_STEPS: tuple[int, ...] = (0, 3, 6, 9)


def lane_of(queue: str, priority: Any, steps: Sequence[int], sep: str) -> str:
    """The kombu list (without key prefix) a message of ``priority`` goes to: kombu's
    Redis channel clamps it to 0..9 (0 when absent) and takes the largest step below."""
    try:
        level = min(max(int(priority), 0), 9)
    except (TypeError, ValueError):
        level = 0
    step = steps[bisect.bisect(steps, level) - 1]
    return queue if step == 0 else f"{queue}{sep}{step}"


@dataclass(frozen=True, slots=True)
class KombuRedisLayout:
    """Where kombu keeps one broker's queues (see the module docstring).

    Args:
        priority_steps: kombu's ``priority_steps`` transport option.
        sep: kombu's separator between queue name and priority step.
        global_keyprefix: kombu's ``global_keyprefix`` transport option.
        unacked_key: kombu's ``unacked_key`` transport option.
    """

    priority_steps: tuple[int, ...] = KOMBU_PRIORITY_STEPS
    sep: str = KOMBU_SEP
    global_keyprefix: str = ""
    unacked_key: str = "unacked"

    def __post_init__(self) -> None:
        steps = tuple(sorted({int(step) for step in self.priority_steps}))
        if not steps or steps[0] != 0 or steps[-1] > 255:
            raise ConfigurationError(
                f"priority_steps must start at 0 and stay within 0..255, "
                f"got {self.priority_steps!r}"
            )
        object.__setattr__(self, "priority_steps", steps)

    @classmethod
    def from_transport_options(cls, options: Mapping[str, Any] | None) -> KombuRedisLayout:
        """The layout a Celery app's ``broker_transport_options`` give kombu."""
        opts = dict(options or {})
        return cls(
            priority_steps=tuple(opts.get("priority_steps", KOMBU_PRIORITY_STEPS)),
            sep=str(opts.get("sep", KOMBU_SEP)),
            global_keyprefix=str(opts.get("global_keyprefix", "") or ""),
            unacked_key=str(opts.get("unacked_key", "unacked")),
        )

    def lane(self, queue: str, step: int) -> str:
        """The list of ``queue``'s messages of priority step ``step``, without prefix."""
        return queue if step == 0 else f"{queue}{self.sep}{step}"

    def lane_for(self, queue: str, priority: Any) -> str:
        """The lane a message of ``priority`` published to ``queue`` goes to."""
        return lane_of(queue, priority, self.priority_steps, self.sep)

    def list_key(self, queue: str, step: int) -> str:
        """The Redis list holding ``queue``'s messages of priority step ``step``."""
        return self.global_keyprefix + self.lane(queue, step)

    def list_keys(self, queue: str) -> list[str]:
        """Every Redis list holding ``queue``'s messages, one per priority step."""
        return [self.list_key(queue, step) for step in self.priority_steps]

    @property
    def unacked_hash(self) -> str:
        """The Redis hash of messages delivered and not yet acknowledged."""
        return self.global_keyprefix + self.unacked_key

    def binding_key(self, exchange: str) -> str:
        """The set of ``exchange``'s bindings."""
        return f"{self.global_keyprefix}_kombu.binding.{exchange}"

    def parse_binding(self, member: bytes | str) -> tuple[str, str] | None:
        """``(routing_key, queue)`` of one binding set member; None if not kombu's."""
        parts = text(member).split(self.sep)
        return (parts[0], parts[2]) if len(parts) == 3 else None
