"""A Redis broker that refuses writes must not take a worker down or lose a message.

With ``maxmemory`` and ``noeviction``, Redis refuses writes (``OOM``) and every
command inside ``MULTI``; after a failover the old primary answers ``READONLY``. kombu's
ack emulation writes on every step of a message's life in the worker's main process
— recording it as unacked right after ``BRPOP`` (the message has already left the
queue), acking, requeueing — and a refused write there is a channel error that Celery
calls unrecoverable: the main process exits, and the popped message is gone.

:class:`WriteTolerantQoS` keeps such a write in an in-memory journal instead of
raising, and replays it once Redis takes writes again. Until then the message keeps
its prefetch slot, so a worker with prefetch 1 holds at most one message per process
in memory and stops taking more from the queue: the backlog waits in the broker and
the workers wait with it, then resume. Nothing is acked that was not done, nothing is
dropped that was not acked. If the process dies while a popped message is only in
its journal, the orphan sweep (:mod:`tidegate.integrations.celery.sweep`) brings the
unit back, as for any message lost between ``BRPOP`` and its unacked record.

:func:`install_write_tolerant_broker` selects the transport for a ``redis://`` broker
(``rediss://`` with ``broker_use_ssl``), and turns on ``broker_channel_error_retry``
so that any other refused write in the consumer reconnects instead of exiting.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu.transport import redis as kombu_redis
from kombu.utils.json import loads

from tidegate._redis import unwritable_cause
from tidegate.logging import get_logger

__all__ = [
    "TRANSPORT",
    "Channel",
    "Transport",
    "WriteTolerantQoS",
    "install_write_tolerant_broker",
    "on_put",
    "on_requeue",
]

log = get_logger("tidegate.celery")

#: What ``broker_transport`` is set to (kombu resolves ``module:Class``).
TRANSPORT = "tidegate.integrations.celery.broker:Transport"
#: Seconds between attempts to replay the journal while Redis refuses writes.
RETRY_INTERVAL_S = 0.5

_REQUEUE_HOOKS: list[Callable[[Any], None]] = []
#: ``hook(channel, queue, message, batch) -> bool``: True when the hook pushed it.
PutHook = Callable[[Any, str, dict[str, Any], Any], bool]
_PUT_HOOKS: list[PutHook] = []


def on_put(hook: PutHook) -> Callable[[], None]:
    """Let ``hook`` push a message instead of kombu's plain ``LPUSH`` (publish tracking
    pushes and records a tracked unit in one round trip); returns the function that
    removes it. ``batch`` is kombu's publish batch when the publish is batched, else
    ``None``."""
    _PUT_HOOKS.append(hook)

    def remove() -> None:
        if hook in _PUT_HOOKS:
            _PUT_HOOKS.remove(hook)

    return remove


def on_requeue(hook: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``hook(message)`` after a message was pushed back at the newest end of its
    list (a reject with requeue); returns the function that removes it. The orphan
    sweep counts such a message as published anew (:mod:`.sweep_index`)."""
    _REQUEUE_HOOKS.append(hook)

    def remove() -> None:
        if hook in _REQUEUE_HOOKS:
            _REQUEUE_HOOKS.remove(hook)

    return remove


def _requeued(message: Any) -> None:
    for hook in list(_REQUEUE_HOOKS):
        try:
            hook(message)
        except Exception as exc:  # a hook must never stop the consumer
            log.warning("requeue_hook_failed", error=type(exc).__name__)


@dataclass
class _Pending:
    """A message whose broker bookkeeping is owed to Redis.

    ``recorded`` is False while the unacked record (written after ``BRPOP``) is
    missing; ``outcome`` is ``None`` while the task runs, then ``"ack"`` or
    ``"requeue"``.
    """

    message: Any
    recorded: bool
    outcome: str | None = None
    since: float = 0.0


def _attached(channel: Any) -> bool:
    """Whether ``channel`` can still reach Redis: through the connection pool it has,
    or one built from its transport's connection, which ``Connection.collect()``
    detaches. A channel closed while its transport was attached keeps the pool its
    restore built, and its late acks go through (to the restarted server)."""
    if getattr(channel, "_pool", None) is not None:
        return True
    transport = getattr(channel, "connection", None)
    return transport is not None and getattr(transport, "client", None) is not None


class WriteTolerantQoS(kombu_redis.QoS):
    """kombu's Redis QoS with a journal for refused writes (see the module)."""

    # kombu's own helpers, missing from its stubs.
    _quick_append: Callable[[str, Any], None]
    _quick_ack: Callable[[str], None]
    _remove_from_indices: Callable[..., Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, _Pending] = {}
        self._next_retry = 0.0
        self.clock: Callable[[], float] = time.monotonic

    # -- kombu's entry points ------------------------------------------------------------

    def append(self, message: Any, delivery_tag: str) -> None:
        try:
            super().append(message, delivery_tag)
        except Exception as exc:
            cause = unwritable_cause(exc)
            if cause is None:
                raise
            self._quick_append(delivery_tag, message)  # holds the prefetch slot
            self._defer(delivery_tag, _Pending(message, recorded=False), "record", cause)

    def ack(self, delivery_tag: str) -> None:
        self._settle(delivery_tag, "ack")

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self._settle(delivery_tag, "requeue" if requeue else "ack")

    def can_consume(self) -> bool:
        if self._pending:
            self.flush_pending()
        return bool(super().can_consume())

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        """The periodic scan for expired unacked messages takes a lock (a write): a
        refusal skips this round instead of stopping the event loop."""
        try:
            super().restore_visible(*args, **kwargs)
        except Exception as exc:
            if unwritable_cause(exc) is None:
                raise

    def restore_unacked(self, client: Any = None) -> None:
        """At shutdown or on a lost connection: what is still owed goes back to the
        queue if Redis allows; what cannot is said, never dropped in silence."""
        for pending in self._pending.values():
            if pending.outcome is None:
                pending.outcome = "requeue"
        try:
            self.flush_pending(force=True)
        except Exception as exc:  # the connection itself is gone: kombu's restore decides
            log.error("broker_journal_flush_failed", error=type(exc).__name__)
        if self._pending:
            # Recorded ones stay in ``unacked`` (restored after the visibility timeout);
            # the others exist only here: the orphan sweep brings their units back.
            log.error(
                "broker_journal_abandoned",
                recorded=sum(p.recorded for p in self._pending.values()),
                unrecorded=sum(not p.recorded for p in self._pending.values()),
            )
            self._pending.clear()
        if client is None and not _attached(self.channel):
            # Celery, on a lost connection, first ``collect()``s it: kombu closes its
            # channels and detaches the transport. When a BRPOP was in flight, the
            # first close of the consuming channel fails before it counts as closed
            # (reading the BRPOP reply raises), and if closing another channel raises
            # too (the pidbox's auto-delete queue), this one is left open; Celery's
            # ``connection.close()`` then closes it again with no transport to build a
            # Redis client from. kombu's restore would raise AttributeError there,
            # which no caller ignores: the consumer dies ("Unrecoverable error") and
            # the worker stops taking messages for good. The messages are recorded in
            # ``unacked`` (the unrecorded ones were dealt with above), so the
            # visibility timeout gives them back.
            if self._delivered:
                log.warning(
                    "broker_unacked_restore_skipped",
                    reason="channel_detached",
                    messages=len(self._delivered),
                )
            return
        super().restore_unacked(client)

    # -- the journal ---------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Messages whose bookkeeping Redis still owes (0 in normal operation)."""
        return len(self._pending)

    def _settle(self, tag: str, outcome: str) -> None:
        if not _attached(self.channel):
            # A task that outlived its connection ends after Celery reconnected: its
            # channel has neither a pool nor a transport left to build a Redis client
            # from (see restore_unacked), and kombu's write would raise AttributeError
            # in the event loop, ending the consumer.
            # The message is in ``unacked``: the visibility timeout hands it out again
            # and the delivery ledger settles it without a second call.
            self._pending.pop(tag, None)
            self._quick_ack(tag)
            log.warning("broker_settle_skipped", operation=outcome, reason="channel_detached")
            return
        pending = self._pending.get(tag)
        if pending is not None:
            pending.outcome = outcome
            self.flush_pending(force=True)
            return
        try:
            self._write(tag, outcome, recorded=True, message=None)
        except Exception as exc:
            cause = unwritable_cause(exc)
            if cause is None:
                raise
            message = self._delivered.get(tag) if self._delivered is not None else None
            self._defer(tag, _Pending(message, recorded=True, outcome=outcome), outcome, cause)
            return
        self._quick_ack(tag)

    def _defer(self, tag: str, pending: _Pending, operation: str, cause: str) -> None:
        pending.since = self.clock()
        self._pending[tag] = pending
        self._next_retry = pending.since + RETRY_INTERVAL_S
        log.warning(
            "broker_write_deferred",
            operation=operation,
            cause=cause,
            pending=len(self._pending),
        )

    def _write(self, tag: str, outcome: str | None, *, recorded: bool, message: Any) -> None:
        """One owed write; raises what Redis answers."""
        if outcome is None:
            if not recorded:
                super().append(message, tag)
            return
        if outcome == "ack":
            if recorded:
                self._remove_from_indices(tag).execute()
            return
        if recorded:
            requeued = self._delivered.get(tag) if self._delivered is not None else None
            self.restore_by_tag(tag, leftmost=True)
            if requeued is not None:
                _requeued(requeued)
            return
        raw = message._raw if message is not None else None
        if raw is None:
            return
        delivery = message.delivery_info or {}
        payload = loads(raw) if isinstance(raw, str | bytes) else raw
        channel: Any = self.channel
        with channel.conn_or_acquire() as client:
            pipe = client.pipeline()
            channel._do_restore_message(
                payload, delivery.get("exchange", ""), delivery.get("routing_key", ""), pipe, True
            )
            pipe.execute()
        _requeued(message)

    def flush_pending(self, *, force: bool = False) -> None:
        """Replay the owed writes, oldest first; stop at the first refusal."""
        now = self.clock()
        if not self._pending or (not force and now < self._next_retry):
            return
        self._next_retry = now + RETRY_INTERVAL_S
        for tag, pending in list(self._pending.items()):
            try:
                self._write(
                    tag, pending.outcome, recorded=pending.recorded, message=pending.message
                )
            except Exception as exc:
                if unwritable_cause(exc) is None:
                    raise
                return
            if pending.outcome is None:
                pending.recorded = True
                del self._pending[tag]
                continue
            del self._pending[tag]
            self._quick_ack(tag)
            log.info(
                "broker_write_resumed",
                operation=pending.outcome,
                deferred_s=round(now - pending.since, 3),
                pending=len(self._pending),
            )


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with :class:`WriteTolerantQoS`, :func:`on_put` hooks, and
    one reused client for its one-off commands.

    kombu builds a new ``redis.Redis`` for every command it sends outside the ``BRPOP``
    connection (``conn_or_acquire()``): the unacked record after each delivery, each ack,
    each publish. Building one copies redis-py's table of about 200 response callbacks,
    and in a worker's main process, which does two of these per task, that was a tenth of
    its CPU (py-spy, bulk pool main process at 100,000 B/Ls) — the process that hands every
    task to the pool and caps the parse step's rate (issue #18). The client is only a
    front for the channel's connection pool, so one per pool does the same work.
    """

    QoS = WriteTolerantQoS

    # kombu's own helper, missing from its stubs.
    _create_client: Callable[..., Any]

    _shared_client: Any = None
    _shared_client_pool: Any = None

    @contextlib.contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        if self._shared_client is None or self._shared_client_pool is not pool:
            # A reconnect gives the channel a new pool; the client follows it.
            self._shared_client, self._shared_client_pool = self._create_client(), pool
        yield self._shared_client

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        batch = kwargs.get("_publish_batch")
        for hook in list(_PUT_HOOKS):
            if hook(self, queue, message, batch):
                return
        super()._put(queue, message, **kwargs)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`; selected by ``broker_transport``."""

    Channel = Channel


def install_write_tolerant_broker(app: Celery) -> None:
    """Use :class:`Transport` for a Redis broker and retry on channel errors.

    Leaves a broker that is not Redis (AMQP, Sentinel) and an explicitly chosen
    ``broker_transport`` alone. A ``rediss://`` broker gets the transport only with
    ``broker_use_ssl`` set: kombu derives its TLS default from the URL scheme only when
    the transport is named by that scheme, and an explicit transport would otherwise
    connect in plain text.
    """
    url = str(app.conf.broker_url or "")
    tls_ready = url.startswith("rediss://") and bool(app.conf.broker_use_ssl)
    if (url.startswith("redis://") or tls_ready) and not app.conf.broker_transport:
        app.conf.broker_transport = TRANSPORT
    app.conf.broker_channel_error_retry = True
