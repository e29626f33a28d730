"""A tracked publish in one round trip: record, LPUSH and confirm as one script.

Publish tracking (:mod:`tidegate.integrations.celery.tracking`) records a unit before
kombu's LPUSH (its ``s0`` goes in the message) and confirms it after (a new ``s1``):
two scripts around the push, three round trips per publish. When tidegate's Redis is
the broker's own server and database, all three can be one script
(``outstanding_publish.lua``) run from tidegate's broker channel in place of kombu's
LPUSH; what is recorded is the same, in the same order (see
:mod:`tidegate.integrations.celery.sweep_index` for why the order matters).

The message's JSON is cut where ``s0`` goes, and the script joins the two halves
around the number it hands out. In a kombu publish batch (the intake's publish
thread) the script is added to the batch's pipeline instead, so a batched unit's ``s1``
too is handed out only after its push. It goes there by ``EVALSHA``, not by ``EVAL``
with the script's text in every message's command: the script is registered with the
batch's redis-py pipeline, which before running its commands asks ``SCRIPT EXISTS``
once and loads the script if the server lacks it (after a restart or ``SCRIPT
FLUSH``): the NOSCRIPT fallback costs one round trip per flush, not per message. When
kombu flushes a full batch just before it adds a message's commands, that flush has
loaded the script; the next flush registers it again with the next message.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.utils.json import dumps

from tidegate.load.outstanding import SEQ_HEADER, Outstanding, OutstandingUnit

__all__ = ["push_tracked", "same_redis", "split_at_seq"]

#: Stands for ``s0`` in the message while it is encoded; the script replaces it.
_PLACEHOLDER = "\x00tidegate-seq\x00"
_PLACEHOLDER_JSON = dumps(_PLACEHOLDER)


def _location(kwargs: dict[str, Any]) -> tuple[str, str, int, int]:
    path = str(kwargs.get("path") or "")
    host = "" if path else str(kwargs.get("host") or "localhost")
    port = 0 if path else int(kwargs.get("port") or 6379)
    return path, host, port, int(kwargs.get("db") or 0)


def same_redis(broker_url: str, client: redis.Redis) -> bool:
    """Whether ``client`` talks to the server and database of the broker at
    ``broker_url`` (compared as written: ``localhost`` and ``127.0.0.1`` differ, and
    the publish then simply takes the separate round trips)."""
    try:  # parses the URL only: a client connects at its first command
        broker = redis.Redis.from_url(broker_url).connection_pool.connection_kwargs
    except ValueError:
        return False
    ours = client.connection_pool.connection_kwargs
    return _location(dict(broker)) == _location(dict(ours))


def split_at_seq(message: dict[str, Any]) -> tuple[str, str] | None:
    """kombu's JSON of ``message`` cut where its ``s0`` header's value goes; None when
    the cut is not unique (the placeholder occurs in the message itself)."""
    headers = message["headers"]
    headers[SEQ_HEADER] = _PLACEHOLDER
    try:
        parts = dumps(message).split(_PLACEHOLDER_JSON)
    finally:
        headers.pop(SEQ_HEADER, None)
    return (parts[0], parts[1]) if len(parts) == 2 else None


def push_tracked(
    outstanding: Outstanding,
    unit: OutstandingUnit,
    *,
    channel: Any,
    queue: str,
    message: dict[str, Any],
    batch: Any,
) -> bool:
    """Push ``message`` to ``queue`` through ``channel`` with its unit's records, in one
    script; False (nothing done) where that cannot be done exactly as kombu would push
    it: queues with an expiry, a list other than the unit's lane, a batch on a broker
    with ``global_keyprefix``."""
    if getattr(channel, "_expires", None) and queue in channel._expires:
        return False
    lane = channel._q_for_pri(queue, channel._get_message_priority(message, reverse=False))
    if lane != unit.index_lane:
        return False
    cut = split_at_seq(message)
    if cut is None:
        return False
    prefix = str(getattr(channel, "global_keyprefix", "") or "")
    list_key = prefix + lane
    if batch is None:
        s0, _s1 = outstanding.publish(unit, list_key, *cut)
        message["headers"][SEQ_HEADER] = s0
        return True
    if prefix:
        return False  # kombu's prefixing pipeline would rewrite the script's keys
    pipeline = getattr(batch, "pipeline", None)
    scripts = getattr(pipeline, "scripts", None)
    if not isinstance(scripts, set):
        return False  # not a redis-py pipeline: kombu's own LPUSH, separate records
    script = outstanding.publish_script_object
    scripts.add(script)  # redis-py: SCRIPT EXISTS (and LOAD if missing) at the flush
    keys, args = outstanding.publish_keys_args(unit, list_key, *cut)
    batch.add("evalsha", script.sha, len(keys), *keys, *args)
    return True
