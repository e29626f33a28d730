"""The one keyspace: every Redis key tidegate itself writes is built here.

A fleet shares one prefix (``TIDEGATE_PREFIX``, default :data:`DEFAULT_PREFIX`), and
every key starts ``<prefix>:``, so ``SCAN <prefix>:*`` finds them all and two fleets on
one Redis never meet. Stores and CLI commands ask a :class:`Keyspace` for their keys and
never format one themselves; a test pins the layout of every family, because data in a
running Redis must stay readable after an upgrade.

The hash-tag rule (why: Redis Cluster). Cluster hashes only the text inside the first
``{...}`` of a key, and a Lua script or ``MULTI`` may only touch keys of one slot. So
every key that one script takes shares one tag:

- a store of one namespace (parking, DLQ, quarantine, outstanding, the load hashes,
  the console's ring, the metrics stream) tags its family: ``<prefix>:{parking}:due``;
- a family kept per name (a gate, rate or concurrency limit, an adaptive controller,
  a downstream's ledger, a bulk batch) tags the name: ``<prefix>:gate:{customs}:tat``,
  so each name can live on its own slot. Such a name must not contain ``{`` or ``}``;
- a key no script shares with another (an intake interchange) has no tag.

Keys of kombu (``_kombu.binding.*``, ``unacked``, priority sub-queues) and of RQ
(``rq:*``) follow those libraries' layouts and are not built here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from tidegate.errors import ConfigurationError

__all__ = [
    "DEFAULT_PREFIX",
    "LIMIT_KINDS",
    "AdaptiveKeys",
    "BatchKeys",
    "DlqKeys",
    "GateKeys",
    "Keyspace",
    "OutstandingKeys",
    "ParkingKeys",
    "QuarantineKeys",
]

#: Prefix of every key tidegate writes, unless a fleet sets ``TIDEGATE_PREFIX``.
DEFAULT_PREFIX = "tidegate"

#: The kinds of flow limit, each its own family: gate, rate limiter, concurrency limiter.
LIMIT_KINDS = ("gate", "rate", "sem")

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


@dataclass(frozen=True, slots=True)
class GateKeys:
    """Every key of one flow limit (tag: its name), for the admission script."""

    tat: str
    leases: str
    pause: str
    config: str
    released: str
    admitted: str

    @classmethod
    def build(cls, name: str, *, kind: str = "gate", prefix: str = DEFAULT_PREFIX) -> GateKeys:
        """Same as ``Keyspace(prefix).limit(name, kind=kind)``; kept for existing callers."""
        return Keyspace(prefix).limit(name, kind=kind)

    def as_list(self) -> list[str]:
        """The five keys the admission script takes, in KEYS order."""
        return [self.tat, self.leases, self.pause, self.config, self.admitted]


@dataclass(frozen=True, slots=True)
class AdaptiveKeys:
    """Every key of one downstream's adaptive controller (tag: the downstream).

    The fenced write touches lease, state and history in one script. ``policy`` holds
    the operator's live overrides, ``obs`` the current observation window, ``wake`` a
    token while that window holds a 429 (the controller blocks on it between ticks,
    so it decides on a 429 at once).
    """

    name: str
    lease: str
    state: str
    history: str
    policy: str
    obs: str
    wake: str

    @classmethod
    def build(cls, name: str, *, prefix: str = DEFAULT_PREFIX) -> AdaptiveKeys:
        """Same as ``Keyspace(prefix).adaptive(name)``; kept for existing callers."""
        return Keyspace(prefix).adaptive(name)


@dataclass(frozen=True, slots=True)
class ParkingKeys:
    """The parking lot (tag ``{parking}``): due times, envelopes, claimed moves."""

    due: str
    env: str
    inflight: str


@dataclass(frozen=True, slots=True)
class DlqKeys:
    """The dead-letter queue (tag ``{dlq}``)."""

    records: str
    order: str
    stats: str
    replaying: str
    replays: str


@dataclass(frozen=True, slots=True)
class QuarantineKeys:
    """The quarantine (tag ``{quarantine}``); one waiting and one in-flight zset per queue."""

    base: str
    records: str
    since: str
    queues: str
    stats: str

    def waiting(self, queue: str) -> str:
        """The FIFO line of ``queue``, by quarantine time."""
        return f"{self.base}:waiting:{queue}"

    def inflight(self, queue: str) -> str:
        """Documents of ``queue`` claimed for replay, by lease expiry."""
        return f"{self.base}:inflight:{queue}"


@dataclass(frozen=True, slots=True)
class OutstandingKeys:
    """The registry of unsettled units and its sweep index (tag ``{outstanding}``).

    ``base`` is handed to the ``outstanding_*`` scripts, which derive a lane's index keys
    from a stored record's lane as ``base .. ":published:" .. lane`` (and ``:pushed:``),
    the same layout as :meth:`published` and :meth:`pushed`.
    """

    base: str
    units: str
    misses: str
    sweep_lock: str
    workers: str
    armed: str
    present: str
    queues: str
    seq: str
    seen: str
    indexed: str

    def published(self, lane: str) -> str:
        """Units of ``lane`` whose push is not confirmed yet (score ``s0``)."""
        return f"{self.base}:published:{lane}"

    def pushed(self, lane: str) -> str:
        """Units of ``lane`` pushed to the broker (score ``s1``)."""
        return f"{self.base}:pushed:{lane}"


@dataclass(frozen=True, slots=True)
class BatchKeys:
    """Every key of one bulk batch (tag: the batch id)."""

    units: str
    order: str
    expected: str
    done: str
    fired: str
    outcomes: str
    forwarded: str
    document: str
    dispatched: str
    summary: str


def _check_name(family: str, name: str) -> None:
    """A name is a hash tag: a brace in it would move the tag (and the slot)."""
    if not name or any(c in name for c in "{}") or name != name.strip():
        raise ConfigurationError(f"invalid {family} name {name!r}")


@dataclass(frozen=True, slots=True)
class Keyspace:
    """The keys of one fleet: one method per key family.

    Args:
        prefix: the fleet's prefix (``TIDEGATE_PREFIX``); validated where it is read
            (:class:`~tidegate.settings.Settings`, the CLI's ``--prefix``).

    Example:
        >>> Keyspace("tg").parking().due
        'tg:{parking}:due'
    """

    prefix: str = DEFAULT_PREFIX

    def everything(self) -> str:
        """A ``SCAN`` pattern matching every key of this fleet."""
        return f"{self.prefix}:*"

    # -- per name (the name is the tag) -------------------------------------------------

    def limit(self, name: str, *, kind: str = "gate") -> GateKeys:
        """Keys of flow limit ``name`` of ``kind`` (``gate``, ``rate`` or ``sem``)."""
        base = f"{self.limit_head(kind)}{name}}}"
        return GateKeys(
            tat=f"{base}:tat",
            leases=f"{base}:leases",
            pause=f"{base}:pause",
            config=f"{base}:config",
            released=f"{base}:released",
            admitted=f"{base}:admitted",
        )

    def limit_head(self, kind: str = "gate") -> str:
        """How every key of a ``kind`` limit starts (``<prefix>:gate:{``): what a scan
        for the fleet's gates matches, and the name follows."""
        return f"{self.prefix}:{kind}:{{"

    def limits_pattern(self, kind: str = "gate") -> str:
        """A ``SCAN`` pattern matching every key of every ``kind`` limit."""
        return _GLOB_SPECIAL.sub(r"\\\1", self.limit_head(kind)) + "*"

    def limit_name(self, key: str, *, kind: str = "gate") -> str | None:
        """The name of the ``kind`` limit that ``key`` belongs to; ``None`` for a key of
        another family or prefix."""
        head = self.limit_head(kind)
        if not key.startswith(head):
            return None
        name, sep, _ = key[len(head) :].rpartition("}:")
        return name if sep else None

    def adaptive(self, name: str) -> AdaptiveKeys:
        """Keys of the adaptive controller of downstream ``name`` (``customs``, ``tos``…).

        Raises:
            ConfigurationError: an empty name, a brace in it, or surrounding blanks.
        """
        _check_name("downstream", name)
        base = f"{self.prefix}:adaptive:{{{name}}}"
        return AdaptiveKeys(
            name,
            f"{base}:lease",
            f"{base}:state",
            f"{base}:history",
            f"{base}:policy",
            f"{base}:obs",
            f"{base}:wake",
        )

    def adaptive_states(self) -> str:
        """A ``SCAN`` pattern matching the learned state of every adaptive controller."""
        return f"{self.prefix}:adaptive:{{*}}:state"

    def adaptive_name(self, key: str) -> str | None:
        """The downstream whose controller ``key`` belongs to; ``None`` for a key of
        another family or prefix."""
        head = f"{self.prefix}:adaptive:{{"
        if not key.startswith(head):
            return None
        name, sep, _ = key[len(head) :].rpartition("}:")
        return name if sep else None

    def delivered(self, downstream: str, key: str) -> str:
        """The ledger entry of idempotency key ``key`` with ``downstream``."""
        return f"{self.prefix}:delivered:{{{downstream}}}:{key}"

    def delivered_all(self) -> str:
        """A ``SCAN`` pattern matching every ledger entry of every downstream."""
        return f"{self.prefix}:delivered:*"

    def ledger_epoch(self, downstream: str) -> str:
        """The Redis run the ledger of ``downstream`` last saw (restart detection)."""
        return f"{self.prefix}:ledger-epoch:{{{downstream}}}"

    def relay_requests(self, downstream: str) -> str:
        """The list of requests waiting for one of ``downstream``'s relay lanes."""
        _check_name("downstream", downstream)
        return f"{self.prefix}:relay:{{{downstream}}}:requests"

    def relay_answer(self, downstream: str, request_id: str) -> str:
        """Where the relay puts the answer to request ``request_id`` (one element)."""
        _check_name("downstream", downstream)
        return f"{self.prefix}:relay:{{{downstream}}}:answer:{request_id}"

    def batch(self, batch_id: str) -> BatchKeys:
        """Keys of bulk batch ``batch_id``."""
        base = f"{self.prefix}:batch:{{{batch_id}}}"
        return BatchKeys(
            units=f"{base}:units",
            order=f"{base}:order",
            expected=f"{base}:expected",
            done=f"{base}:done",
            fired=f"{base}:fired",
            outcomes=f"{base}:outcomes",
            forwarded=f"{base}:forwarded",
            document=f"{base}:document",
            dispatched=f"{base}:dispatched",
            summary=f"{base}:summary",
        )

    # -- per namespace (the family is the tag) --------------------------------------------

    def parking(self) -> ParkingKeys:
        """The parking lot's keys."""
        base = f"{self.prefix}:{{parking}}"
        return ParkingKeys(due=f"{base}:due", env=f"{base}:env", inflight=f"{base}:inflight")

    def dlq(self) -> DlqKeys:
        """The dead-letter queue's keys."""
        base = f"{self.prefix}:{{dlq}}"
        return DlqKeys(
            records=f"{base}:records",
            order=f"{base}:order",
            stats=f"{base}:stats",
            replaying=f"{base}:replaying",
            replays=f"{base}:replays",
        )

    def quarantine(self) -> QuarantineKeys:
        """The quarantine's keys."""
        base = f"{self.prefix}:{{quarantine}}"
        return QuarantineKeys(
            base=base,
            records=f"{base}:records",
            since=f"{base}:since",
            queues=f"{base}:queues",
            stats=f"{base}:stats",
        )

    def outstanding(self) -> OutstandingKeys:
        """The outstanding registry's and the orphan sweep's keys."""
        base = f"{self.prefix}:{{outstanding}}"
        return OutstandingKeys(
            base=base,
            units=f"{base}:units",
            misses=f"{base}:misses",
            sweep_lock=f"{base}:sweep-lock",
            workers=f"{base}:workers",
            armed=f"{base}:armed",
            present=f"{base}:present",
            queues=f"{base}:queues",
            seq=f"{base}:seq",
            seen=f"{base}:seen",
            indexed=f"{base}:indexed",
        )

    def watermarks(self) -> str:
        """The live watermark overrides (one hash)."""
        return f"{self.prefix}:{{load}}:watermarks"

    def load_board(self) -> str:
        """The monitor's load board: queue → latest sample (one hash)."""
        return f"{self.prefix}:{{load}}:board"

    def monitor_lease(self) -> str:
        """The lease that makes one monitor the fleet's sampler."""
        return f"{self.prefix}:{{load}}:monitor"

    def console_history(self) -> str:
        """The console's ring of chart points (a list, newest first)."""
        return f"{self.prefix}:{{console}}:history"

    def console_turn(self) -> str:
        """Which console samples this period (a short-lived string)."""
        return f"{self.console_history()}:turn"

    def metrics_events(self) -> str:
        """The decision counters the metrics exporter reads."""
        return f"{self.prefix}:{{metrics}}:events"

    def metrics_write_probe(self) -> str:
        """The key the metrics exporter writes to learn whether Redis takes writes."""
        return f"{self.prefix}:{{metrics}}:write_probe"

    def demo_write_probe(self) -> str:
        """The key the demonstration's front door writes to learn whether Redis takes writes."""
        return f"{self.prefix}:demo:write-probe"

    # -- single keys (no tag) ------------------------------------------------------------

    def interchange(self, sender: str, control_reference: str) -> str:
        """The intake's duplicate-window record of one interchange.

        Sender ids and references are the sender's text: hashed (length-prefixed, so no
        two pairs collide), they can hold no glob or separator character in a key.
        """
        digest = hashlib.sha256(
            f"{len(sender)}:{sender},{len(control_reference)}:{control_reference}".encode()
        ).hexdigest()
        return f"{self.prefix}:intake:interchange:{digest}"
