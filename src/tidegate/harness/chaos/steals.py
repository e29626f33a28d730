"""The messages ``kill-workers`` takes off the broker, and which of them the sweep owes.

With each main it kills, the scenario takes the oldest message of that pool's queue,
as kombu loses the message a main had popped and not yet written to ``unacked``. The
message taken is not always its unit's only carrier, though. kombu's ``restore_visible``
pushes expired ``unacked`` messages back at the oldest end, the end the harness takes
from. So the message taken can be a stale copy: restored after a killed worker had
delivered its unit, or while its worker still ran it. Such a unit is settled already
(no registry record), or its record names another message. The orphan sweep rightly
leaves those alone. The full-size run of 2026-12-02 00:59Z still counted every take as a
loss the sweep owed, because the check matched task ids.

So each taken message is classified when it is taken, from tidegate's registry
(:class:`~tidegate.load.outstanding.Outstanding`) and kombu's ``unacked`` hash. The sweep
owes a unit only when its record names this message and no copy of it is in
``unacked``. The check then matches units by ``key_hash``, as ``orphan_republished``
logs them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tidegate._redis import hash_pages
from tidegate.harness.reconcile import keys_in_messages
from tidegate.load.outstanding import Outstanding
from tidegate.logging import key_hash

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import redis

#: The unit's record names the taken message and no copy is in ``unacked``: only the
#: orphan sweep can give it back.
OWED = "lost"
#: A copy with the same task id is in ``unacked``: kombu restores it after the
#: visibility timeout, and the sweep, seeing the id, waits for that.
COPY_IN_UNACKED = "copy_in_unacked"
#: The record names another message: the taken one was a stale copy.
SUPERSEDED = "superseded"
#: No record: the unit was delivered, dead-lettered or parked before the take.
SETTLED = "settled"
#: The message carries no unit key (nothing tidegate tracks).
NO_UNIT = "no_unit"


@dataclass(frozen=True, slots=True)
class TakenMessage:
    """One message the scenario took off the broker, as it stood when taken."""

    t: float
    pool: str
    task_id: str
    key_hash: str
    state: str
    #: kombu marked it redelivered: a copy restored from ``unacked`` or requeued. A copy
    #: restored while a live worker still held the message is not visible as such (kombu
    #: removed its ``unacked`` entry): a failed check with such a take can be that case.
    redelivered: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unacked_ids(client: redis.Redis, task_id: str) -> bool:
    """Whether kombu's ``unacked`` hash holds a message with ``task_id``."""
    for entries in hash_pages(client, "unacked", 500, "chaos read unacked"):
        for raw in entries.values():
            try:
                if json.loads(raw)[0]["headers"]["id"] == task_id:
                    return True
            except (ValueError, KeyError, TypeError, IndexError):
                continue
    return False


def classify(client: redis.Redis, prefix: str, raw: bytes, *, pool: str, t: float) -> TakenMessage:
    """What the taken message ``raw`` (as stored in the broker's list) was."""
    headers = json.loads(raw)["headers"]
    task_id, redelivered = str(headers["id"]), bool(headers.get("redelivered"))
    keys = keys_in_messages([raw])
    if not keys:
        return TakenMessage(t, pool, task_id, "", NO_UNIT, redelivered)
    record = Outstanding(client, prefix=prefix).get(keys[0])
    if record is None:
        state = SETTLED
    elif record.task_id != task_id:
        state = SUPERSEDED
    elif _unacked_ids(client, task_id):
        state = COPY_IN_UNACKED
    else:
        state = OWED
    return TakenMessage(t, pool, task_id, key_hash(keys[0]), state, redelivered)


@dataclass(frozen=True, slots=True)
class SweptBack:
    """What the sweep owed for the taken messages, and what it gave back."""

    taken: int
    owed: int
    swept_back: int
    #: Taken messages the sweep did not owe, by state (stale copies and the like).
    not_owed: dict[str, int]
    #: Units republished that no take explains: losses of their own (a killed main's
    #: real BRPOP window), reported, not counted against the check.
    other_republished: int
    #: Owed units the sweep did not republish that were delivered all the same: another
    #: copy was still running when the take looked (kombu had restored it from
    #: ``unacked`` while a live worker held it, and removed its ``unacked`` entry), so
    #: the take was not the only carrier after all. An owed unit neither republished
    #: nor delivered is in neither count, and the check fails (and ``lost`` with it).
    delivered_by_a_copy: int = 0


def swept_back(
    taken: Sequence[TakenMessage],
    republished: Iterable[Mapping[str, Any]],
    delivered: Iterable[str] = (),
) -> SweptBack:
    """Match ``orphan_republished`` events to the taken messages by unit (``key_hash``);
    ``delivered``: the key hashes the downstreams accepted."""
    swept = {str(e.get("key_hash")) for e in republished}
    owed = {m.key_hash for m in taken if m.state == OWED}
    taken_units = {m.key_hash for m in taken}
    return SweptBack(
        taken=len(taken),
        owed=len(owed),
        swept_back=len(owed & swept),
        not_owed=dict(Counter(m.state for m in taken if m.state != OWED)),
        other_republished=len(swept - taken_units),
        delivered_by_a_copy=len((owed - swept) & set(delivered)),
    )
