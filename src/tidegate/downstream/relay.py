"""The relay: lanes that own a downstream's connections and pipeline the fleet's calls.

Why it exists: with one lease per call, every call's turn leaves its connection idle
for the HTTP exchange around it (the answer's way back, the next holder's admission,
its request's way in), and at 50-ms calls that alone keeps a 4-connection TOS at most
0.93-0.96 busy, whatever the pool (BENCHMARKS.md, "The floor of a per-call lease",
"HTTP/1.1 pipelining"). A lane holds one of the gate's concurrency leases for as long as
there is work, keeps one connection, and writes the next request while the one before
is in service, so the downstream never waits for a client.

The fleet's side does not change shape: a worker is still admitted by the gate (its
rate and pause; no lease, :class:`~tidegate.flow.Gate` with ``leases=False``), still
calls :class:`~tidegate.downstream.DownstreamClient`, and only its transport
(:class:`~tidegate.downstream.RelayTransport`) puts the request on the relay's list
instead of a socket. Lanes are threads of any process that runs a :class:`Relay`; the
gate's concurrency cap bounds them fleet-wide, so two relays (a standby) run as many
lanes between them as one, and a dead relay's leases expire into the other's.

Every request a lane takes off the list gets exactly one answer: the downstream's, or a
:class:`~tidegate.downstream._relay_wire.RelayFailure` saying whether it can have
reached the downstream.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import NamedTuple

import redis

from tidegate._redis import blocking_timeout_s
from tidegate.downstream._pipeline import Pending, PipelinedConnection
from tidegate.downstream._relay_transport import ANSWER_TTL_S
from tidegate.downstream._relay_wire import RelayedAnswer, RelayedRequest, RelayFailure
from tidegate.errors import BackendError, ConfigurationError, Throttled
from tidegate.flow import Gate
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.logging import get_logger
from tidegate.settings import GatePolicy

__all__ = ["DEFAULT_PIPELINE_DEPTH", "Relay", "RelayPolicy"]

log = get_logger("tidegate.relay")

#: Requests a lane keeps on its connection: one in service, one in the downstream's buffer.
DEFAULT_PIPELINE_DEPTH = 2
#: A lane with nothing to send for this long gives its lease back, seconds.
DEFAULT_IDLE_S = 2.0
#: How long a lane waits for a lease, or for a request, before it looks at ``stop``.
_POLL_S = 1.0
#: How long a lane that took a request waits for a lease before it puts it back.
_FIRST_LEASE_WAIT_S = 0.2
#: How long a lane beyond the cap waits for a lease at a time (each wait that ends
#: without one is one ``downstream_gate_throttled`` event; ``stop`` is seen between).
_LEASE_WAIT_S = 5.0


class _Taken(NamedTuple):
    """A request as it was on the list (to put back byte for byte) and decoded."""

    raw: bytes
    request: RelayedRequest


@dataclass(frozen=True, slots=True)
class RelayPolicy:
    """How a relay's lanes behave.

    Args:
        depth: requests written ahead on each connection (>= 1; 1 = no pipelining).
        connect_timeout_s: seconds to open a connection.
        read_timeout_s: seconds an answer may take once a lane waits for it.
        idle_s: a lane with nothing to send this long gives its lease back.
    """

    depth: int = DEFAULT_PIPELINE_DEPTH
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 10.0
    idle_s: float = DEFAULT_IDLE_S

    def __post_init__(self) -> None:
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise ConfigurationError(f"pipeline depth must be an integer >= 1, got {self.depth!r}")
        for name in ("connect_timeout_s", "read_timeout_s", "idle_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}")


class Relay:
    """The lanes of downstream ``name`` in this process.

    Args:
        client: tidegate's Redis.
        name: the downstream (its gate's name).
        base_url: where its lanes connect.
        lanes: lane threads to run here; ``None``: the gate's concurrency cap at start
            (more would only wait for a lease).
        policy: depth, timeouts, idle release.
        prefix: the fleet's key prefix.
        gate_policy: the gate's defaults (the process's settings); ``None`` reads
            ``TIDEGATE_<NAME>_*``.

    Raises:
        ConfigurationError: the gate has no concurrency cap (a relay is for
            connection-limited downstreams) and ``lanes`` was not given.
    """

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        base_url: str,
        *,
        lanes: int | None = None,
        policy: RelayPolicy | None = None,
        prefix: str = DEFAULT_PREFIX,
        gate_policy: GatePolicy | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url
        self.policy = policy or RelayPolicy()
        self._client = client
        # The lanes' leases take no rate token: the workers took one for every call.
        self._gate = Gate(client, name, prefix=prefix, policy=gate_policy, tokens=False)
        self._keys = Keyspace(prefix)
        self._requests = self._keys.relay_requests(name)
        if lanes is None:
            lanes = self._gate.state().policy.concurrency
        if lanes < 1:
            raise ConfigurationError(
                f"downstream {name!r}: a relay needs the gate's concurrency cap "
                "(TIDEGATE_<NAME>_CONCURRENCY) or an explicit lane count"
            )
        self.lanes = lanes
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Relay:
        """Start the lanes (daemon threads)."""
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._lane, args=(i,), name=f"tidegate-relay-{self.name}-{i}")
            for i in range(self.lanes)
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()
        log.info("relay_started", downstream=self.name, lanes=self.lanes, depth=self.policy.depth)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop taking requests; answer what is on the connections, then return."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        log.info("relay_stopped", downstream=self.name)

    def wait(self) -> None:
        """Block until every lane has ended (after :meth:`stop`, from another thread)."""
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> Relay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one lane ---------------------------------------------------------------------

    def _lane(self, index: int) -> None:
        """Wait for work with no lease; take a lease to send it; give the lease back
        when the work stops. A lane that found work but no free lease puts the request
        back at the head of the list and waits for a lease instead, so lanes beyond
        the cap never keep taking requests they cannot send."""
        waiting_for_lease = False
        while not self._stop.is_set():
            first = None
            try:
                if not waiting_for_lease:
                    first = self._take()
                    if first is None:
                        continue
                max_wait = _FIRST_LEASE_WAIT_S if first is not None else _LEASE_WAIT_S
                with self._gate.slot(max_wait=max_wait):
                    waiting_for_lease = False
                    # From here _hold owns it: it writes it, answers it or puts it back.
                    taken, first = first, None
                    self._hold(index, taken)
            except Throttled:
                if first is not None:
                    self._put_back(first)
                waiting_for_lease = True
            except BackendError as exc:
                if first is not None:
                    self._put_back(first)
                log.warning(
                    "relay_lane_backend_error", downstream=self.name, lane=index, error=str(exc)
                )
                self._stop.wait(_POLL_S)
            except Exception as exc:
                # A lane that died would leave the fleet one connection short for good.
                if first is not None:
                    self._put_back(first)
                log.error(
                    "relay_lane_failed", downstream=self.name, lane=index, error=type(exc).__name__
                )
                self._stop.wait(_POLL_S)

    def _hold(self, index: int, first: _Taken | None) -> None:
        """With a lease: one connection, pipelined, until idle, stopped or broken."""
        connection = PipelinedConnection(
            self.base_url,
            connect_timeout_s=self.policy.connect_timeout_s,
            read_timeout_s=self.policy.read_timeout_s,
        )
        try:
            connection.connect()
        except OSError as exc:
            log.warning("relay_connect_failed", downstream=self.name, lane=index, error=str(exc))
            if first is not None:
                not_sent = RelayedAnswer(failure=RelayFailure.NOT_SENT, detail="connect failed")
                self._answer(first.request, not_sent)
            self._stop.wait(_POLL_S)
            return
        sent: queue.Queue[tuple[RelayedRequest, Pending] | None] = queue.Queue()
        room = threading.Semaphore(self.policy.depth)
        broken = threading.Event()
        writer = threading.Thread(
            target=self._write,
            args=(connection, first, sent, room, broken),
            name=f"tidegate-relay-{self.name}-{index}-writer",
            daemon=True,
        )
        writer.start()
        log.info("relay_lane_opened", downstream=self.name, lane=index, depth=self.policy.depth)
        answered, reason = 0, "broken"
        try:
            answered, reason = self._read(connection, sent, room, broken)
        finally:
            if reason == "ended" and broken.is_set():
                reason = "broken"  # the writer's write failed
            broken.set()
            connection.close()
            writer.join()
            # What the writer put on the connection after the reader stopped reading.
            while not sent.empty():
                if (item := sent.get_nowait()) is not None:
                    lost = RelayedAnswer(failure=RelayFailure.LOST, detail="lane closed")
                    self._answer(item[0], lost)
            if reason == "ended":
                reason = "stopped" if self._stop.is_set() else "idle"
            log.info(
                "relay_lane_closed",
                downstream=self.name,
                lane=index,
                answered=answered,
                reason=reason,
            )

    def _write(
        self,
        connection: PipelinedConnection,
        first: _Taken | None,
        sent: queue.Queue[tuple[RelayedRequest, Pending] | None],
        room: threading.Semaphore,
        broken: threading.Event,
    ) -> None:
        """Write ``first``, then take requests off the list and write them, ``depth`` at
        most unanswered; return when idle for ``idle_s``, stopped or broken.

        A lane that came by its lease while waiting (``first`` is ``None``: a lane gave
        one back) keeps it only if there is work right away: idle lanes beyond the cap
        pass a freed lease on within a fraction of a second, not ``idle_s`` each.
        """
        idle_since = time.monotonic()
        idle_limit = self.policy.idle_s if first is not None else _FIRST_LEASE_WAIT_S
        try:
            while not broken.is_set():
                if not room.acquire(timeout=_POLL_S):
                    continue
                if self._stop.is_set() or broken.is_set():
                    if first is not None:
                        self._put_back(first)
                    return
                left = idle_limit - (time.monotonic() - idle_since)
                taken, first = (first or self._take(min(_POLL_S, max(left, 0.0)))), None
                if taken is None:
                    room.release()
                    if time.monotonic() - idle_since >= idle_limit:
                        return
                    continue
                idle_since, idle_limit = time.monotonic(), self.policy.idle_s
                request = taken.request
                if broken.is_set():
                    self._put_back(taken)
                    return
                try:
                    pending = connection.write(
                        request.method, request.target, request.headers, request.body
                    )
                except (OSError, ValueError) as exc:
                    # A partial write may have reached the downstream: say LOST, not NOT_SENT.
                    self._answer(request, RelayedAnswer(failure=RelayFailure.LOST, detail=str(exc)))
                    return
                sent.put((request, pending))
        finally:
            sent.put(None)

    def _read(
        self,
        connection: PipelinedConnection,
        sent: queue.Queue[tuple[RelayedRequest, Pending] | None],
        room: threading.Semaphore,
        broken: threading.Event,
    ) -> tuple[int, str]:
        """Read the answers in the order written and hand each back to its worker;
        return how many, and why it stopped (``ended``: the writer did, idle or stopped;
        ``broken``: the connection failed; ``closed_by_downstream``)."""
        answered = 0
        while (item := sent.get()) is not None:
            request, pending = item
            try:
                answer = connection.read(pending)
            except Exception as exc:
                broken.set()
                self._answer(
                    request, RelayedAnswer(failure=RelayFailure.LOST, detail=type(exc).__name__)
                )
                return answered, "broken"
            self._answer(request, RelayedAnswer(answer.status, answer.headers, answer.body))
            answered += 1
            room.release()
            if not answer.reusable:
                broken.set()
                return answered, "closed_by_downstream"
        return answered, "ended"

    def _take(self, wait_s: float = _POLL_S) -> _Taken | None:
        """The next request, or ``None`` after up to ``wait_s`` (or a malformed one)."""
        try:
            item = self._client.blpop(
                [self._requests], timeout=blocking_timeout_s(self._client, wait_s)
            )
        except redis.RedisError as exc:
            log.warning("relay_take_failed", downstream=self.name, error=type(exc).__name__)
            self._stop.wait(_POLL_S)
            return None
        if item is None:
            return None
        try:
            raw = item[1] if isinstance(item[1], bytes) else str(item[1]).encode()
            return _Taken(raw, RelayedRequest.decode(raw))
        except (ValueError, KeyError, TypeError):
            # Nobody can be answered: its worker times out and treats the call as in doubt.
            log.error("relay_request_malformed", downstream=self.name)
            return None

    def _put_back(self, taken: _Taken) -> None:
        """Return a request this lane cannot send to the head of the list, as it was
        (so its worker can still take it back: ``LREM`` matches the exact payload)."""
        try:
            self._client.lpush(self._requests, taken.raw)
        except redis.RedisError as exc:
            not_sent = RelayedAnswer(failure=RelayFailure.NOT_SENT, detail=type(exc).__name__)
            self._answer(taken.request, not_sent)

    def _answer(self, request: RelayedRequest, answer: RelayedAnswer) -> None:
        key = self._keys.relay_answer(self.name, request.id)
        try:
            with self._client.pipeline(transaction=True) as pipe:
                pipe.rpush(key, answer.encode())
                pipe.expire(key, ANSWER_TTL_S)
                pipe.execute()
        except redis.RedisError as exc:
            # The worker times out and treats the call as in doubt (it looks it up).
            log.warning("relay_answer_failed", downstream=self.name, error=type(exc).__name__)
        if answer.failure is not None:
            log.warning("relay_call_failed", downstream=self.name, failure=answer.failure.value)
