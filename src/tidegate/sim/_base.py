"""What every simulated downstream shares: life cycle, counters, faults, outages.

A sim is a real HTTP/1.1 server (see :mod:`tidegate.sim._http`) bound to a free port
on 127.0.0.1. It serves one *write path* (``POST`` with a JSON body and an
``Idempotency-Key`` header) and a few control endpoints::

    POST   <path>    a write: 200 accepted, or 400/415 malformed, or 429/503 refused
    GET    <path>/<key>
                     a status lookup: 200 when a write with that idempotency key was
                     accepted, 404 when not (503 during an outage)
    GET    /stats    the counters (see :meth:`SimServer.stats`); ?timeline=0 to omit
                     the accept timeline
    GET    /accepted every accepted ``Idempotency-Key`` in accept order, ``{"keys": [...]}``
    POST   /reset    clear counters, admission state, faults and 503 outages
    POST   /outage   {"seconds": 60, "mode": "503" | "refuse", "retry_after": false}
    DELETE /outage   end an outage now
    POST   /fault    {"mode": "429_no_retry_after", "count": 3, "seconds": null}
    DELETE /fault    clear the fault

A write goes through, in order: an active outage (503), an active fault, validation
(415 not JSON, 400 invalid JSON or missing ``Idempotency-Key``, 400 with the code of an
optional document check — :meth:`SimServer.set_document_check`), then the sim's own
admission policy (:meth:`SimServer._admit`: token bucket, connection cap, latency).
Only an accepted write is recorded, with its key, at the instant it was admitted — so
a write whose response the client never saw (a timeout) still counts, which is exactly
how at-least-once delivery produces duplicates. A sim set to *commit at the end*
(:meth:`SimServer.set_commit_at_end`) records it only when its service time is over,
as a downstream that writes its database at the end of the request does: until then a
lookup answers 404, even though the write is in its hands and will be accepted.

Time comes from an injectable monotonic ``clock``; timestamps in the stats are
``time.time()`` floats derived from it, so a test that steps a fake clock gets a
consistent timeline. ``sleep`` (the service time of an accepted write) is injectable
too, so a test can hold requests in flight without racing the wall clock.

Why one module of ~740 lines: :class:`SimServer` is one piece of shared state behind
one lock — the accepted keys, counters, fault, outage, stragglers and the admission
policy's hooks — and every write, lookup and control endpoint reads and changes it
under that lock; the concrete sims (the customs gateway, the TOS, the
database) only add their admission policy.
"""

from __future__ import annotations

import json
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal, Self, TypeAlias, get_args

from tidegate.errors import ConfigurationError
from tidegate.logging import get_logger
from tidegate.sim._http import CONTROL_PATHS, Reply, SimHTTPServer, json_reply
from tidegate.sim._stats import StatsRecorder

__all__ = [
    "BAD_RETRY_AFTER",
    "CONTROL_PATHS",
    "DEFAULT_HOST",
    "FAULT_MODES",
    "HUGE_RETRY_AFTER_S",
    "OUTAGE_MODES",
    "Clock",
    "DocumentCheck",
    "FaultMode",
    "OutageMode",
    "SimServer",
    "Verdict",
    "check_positive",
]

log = get_logger("tidegate.sim")

Clock: TypeAlias = Callable[[], float]
#: Validates a write's parsed JSON body: ``None`` to accept it, or the error code of a 400.
DocumentCheck: TypeAlias = Callable[[Any], "str | None"]

#: How a sim misbehaves on purpose, to test a client against a downstream that lies.
#: ``200_not_json`` applies to writes that pass admission: they are accepted and
#: recorded, but the answer is an HTML page.
FaultMode: TypeAlias = Literal[
    "429_no_retry_after",
    "429_bad_retry_after",
    "429_huge_retry_after",
    "503",
    "422",
    "200_not_json",
]
#: ``503``: every write is answered 503. ``refuse``: the listening socket is closed and
#: open connections are reset, so clients see connection refused; the sim reopens on
#: the same port when the outage ends.
OutageMode: TypeAlias = Literal["503", "refuse"]

FAULT_MODES: frozenset[str] = frozenset(get_args(FaultMode))
OUTAGE_MODES: frozenset[str] = frozenset(get_args(OutageMode))

DEFAULT_HOST = "127.0.0.1"
#: The ``Retry-After`` value of the ``429_bad_retry_after`` fault.
BAD_RETRY_AFTER = "soon-ish"
#: The ``Retry-After`` of the ``429_huge_retry_after`` fault: a day, absurd for a throttle.
HUGE_RETRY_AFTER_S = 86_400
#: How long ``stop()`` waits for answers still being written (a slow service time).
_HANDLER_JOIN_S = 10.0
#: How often the accept loop checks for shutdown; bounds the time ``stop()`` takes.
_POLL_INTERVAL_S = 0.05
_MAX_KEY_LENGTH = 255


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a sim's admission policy decided for one well-formed write.

    Args:
        status: 200 to accept; 429 or 503 to refuse.
        retry_after_s: whole seconds for the ``Retry-After`` header of a refusal;
            ``None`` sends no header.
        service_s: how long an accepted write takes (its handler thread sleeps).
        reason: a snake_case code put in a refusal's JSON body as ``error``.
        extra: fields added to an acceptance's JSON body.
    """

    status: int = 200
    retry_after_s: int | None = None
    service_s: float = 0.0
    reason: str = "accepted"
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Fault:
    mode: FaultMode
    remaining: int | None
    until: float | None


@dataclass(slots=True)
class _Stragglers:
    service_s: float
    every: int
    remaining: int
    seen: int = 0


@dataclass(frozen=True, slots=True)
class _Outage:
    mode: OutageMode
    until: float | None
    retry_after: bool


def _positive_or_none(name: str, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{name} must be a finite number > 0 or None, got {value!r}")
    return value


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Validate a finite number > 0 (or >= 0); raise :class:`ConfigurationError`."""
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(f"{name} must be a finite number {bound}, got {value!r}")
    return value


class SimServer(ABC):
    """Base of the simulated downstreams: an HTTP server in a background thread.

    Args:
        path: the write path (``POST`` only), e.g. ``"/declarations"``.
        host: the address to bind; loopback by default.
        port: the port to bind; 0 picks a free one (read it back from :attr:`url`).
        clock: monotonic seconds; inject a fake to step time in tests.
        wall_clock: ``time.time``; read once, to turn ``clock`` instants into
            timestamps for the stats.
        sleep: how an accepted write waits out its service time.

    A sim is a context manager (``with CustomsSim(rate=5, burst=2) as sim: sim.url``)
    or is started and stopped explicitly. Subclasses implement :meth:`_admit`.
    """

    #: The name used on the command line, in stats and in log events.
    kind: ClassVar[str] = "sim"

    def __init__(
        self,
        *,
        path: str,
        host: str = DEFAULT_HOST,
        port: int = 0,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        if not path.startswith("/") or path in CONTROL_PATHS:
            raise ConfigurationError(
                f"path must start with '/' and not be one of {sorted(CONTROL_PATHS)}, got {path!r}"
            )
        if not 0 <= port <= 65535:
            raise ConfigurationError(f"port must be in 0..65535, got {port!r}")
        self.path = path
        self.host = host
        self._port = port
        self._clock = clock
        self._sleep = sleep
        self._mono0 = clock()
        self._wall0 = wall_clock()
        # _lock guards the counters and the admission state (held for microseconds);
        # _life_lock serialises start/stop/outages (held while sockets open and close).
        self._lock = threading.Lock()
        self._life_lock = threading.Lock()
        self._recorder = StatsRecorder()
        self._in_flight = 0
        self._admitted_in_flight = 0
        self._fault: _Fault | None = None
        self._rejected: frozenset[str] = frozenset()
        self._document_check: DocumentCheck | None = None
        self._outage: _Outage | None = None
        self._commit_at_end = False
        self._stragglers: _Stragglers | None = None
        self._server: SimHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._started = False
        self._refusing = False
        self._reopen_timer: threading.Timer | None = None

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> Self:
        """Bind the port and serve in a daemon thread; idempotent."""
        with self._life_lock:
            if not self._started:
                self._open()
                self._started = True
        log.info("sim_started", kind=self.kind, url=self.url, path=self.path)
        return self

    def stop(self) -> None:
        """Close the listening socket and every open connection; idempotent."""
        with self._life_lock:
            if not self._started:
                return
            self._started = False
            self._refusing = False
            self._cancel_reopen()
            server = self._server
            if server is not None:
                self._close()
        still_running = 0 if server is None else server.join_handlers(_HANDLER_JOIN_S)
        if still_running:
            log.warning("sim_handlers_still_running", kind=self.kind, handlers=still_running)
        log.info("sim_stopped", kind=self.kind, port=self._port)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the sim was started and not stopped (also true during an outage)."""
        return self._started

    @property
    def port(self) -> int:
        """The bound port (stays the same across a ``refuse`` outage)."""
        if not self._started and self._port == 0:
            raise RuntimeError(f"{self.kind} sim is not started")
        return self._port

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    @property
    def endpoint(self) -> str:
        """The full URL of the write path."""
        return self.url + self.path

    def _open(self) -> None:
        server = SimHTTPServer((self.host, self._port), self)
        self._port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _POLL_INTERVAL_S},
            name=f"tidegate-sim-{self.kind}-{self._port}",
            daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread

    def _close(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        server.drop_connections()
        thread.join()

    def _cancel_reopen(self) -> None:
        if self._reopen_timer is not None:
            self._reopen_timer.cancel()
            self._reopen_timer = None

    # -- counters --------------------------------------------------------------------

    def _to_wall(self, instant: float) -> float:
        return self._wall0 + (instant - self._mono0)

    def stats(self, *, timeline: bool = True) -> dict[str, Any]:
        """The counters, as served at ``GET /stats`` (``GET /stats?timeline=0`` and
        ``timeline=False`` leave out ``accept_timeline``, which grows with every accept).

        Keys: ``kind``, ``url``, ``path``, ``accepted``, ``distinct_keys``,
        ``duplicates`` (accepted − distinct_keys), ``requests`` (writes received),
        ``lookups`` (status lookups answered),
        ``responses`` (status → count), ``responses_429``, ``responses_503``,
        ``responses_4xx`` (4xx other than 429), ``max_concurrent_seen`` (writes in the
        server at once, refused ones included), ``in_flight``, ``first_accept_ts``,
        ``last_accept_ts`` (``time.time()`` floats or ``None``), ``max_accepted_1s``,
        ``accept_timeline`` (every accept instant, ``time.time()`` floats, in order),
        ``request_timeline`` (``[instant, status]`` of every write, refused ones too),
        ``served`` / ``service_s_total`` (admitted writes whose service ended, and their
        summed service time), ``service_timeline`` (``[start, end]`` of each),
        ``outage`` and ``fault`` (the active mode or ``None``), plus the sim's own
        settings and state (e.g. ``rate``, ``burst``, ``suspensions``).
        """
        with self._lock:
            now = self._clock()
            snapshot = self._recorder.snapshot(
                in_flight=self._in_flight, to_wall=self._to_wall, timeline=timeline
            )
            outage = self._active_outage(now)
            fault = self._active_fault(now)
            policy = self._policy_stats(now)
        started = self._started or self._port != 0
        return {
            "kind": self.kind,
            "url": self.url if started else None,
            "path": self.path,
            **snapshot,
            "outage": "refuse" if self._refusing else (outage.mode if outage else None),
            "fault": fault.mode if fault else None,
            **policy,
        }

    def accepted_keys(self) -> list[str]:
        """Every accepted ``Idempotency-Key`` in accept order (a duplicate once per accept)."""
        with self._lock:
            return self._recorder.accepted_keys()

    def reset(self) -> None:
        """Clear counters, admission state (full bucket, no suspension), faults, 503 outages.

        A ``refuse`` outage is left alone: end it with :meth:`end_outage`.
        """
        with self._lock:
            self._recorder.reset(in_flight=self._in_flight)
            self._fault = None
            self._rejected = frozenset()
            self._outage = None
            self._stragglers = None
            self._reset_policy(self._clock())
        log.info("sim_reset", kind=self.kind)

    # -- misbehaviour ----------------------------------------------------------------

    def set_fault(
        self, mode: FaultMode, *, count: int | None = None, seconds: float | None = None
    ) -> None:
        """Misbehave on purpose for the next ``count`` writes and/or ``seconds``.

        Args:
            mode: one of :data:`FAULT_MODES`.
            count: how many writes get the fault; ``None`` for no count limit.
            seconds: for how long on the sim clock; ``None`` for no time limit. With
                neither, the fault lasts until :meth:`clear_fault`.

        Replaces any active fault.
        """
        if mode not in FAULT_MODES:
            raise ConfigurationError(f"fault mode must be one of {sorted(FAULT_MODES)}: {mode!r}")
        if count is not None and count < 1:
            raise ConfigurationError(f"count must be >= 1 or None, got {count!r}")
        _positive_or_none("seconds", seconds)
        with self._lock:
            until = None if seconds is None else self._clock() + seconds
            self._fault = _Fault(mode, count, until)
        log.info("sim_fault_set", kind=self.kind, mode=mode, count=count, seconds=seconds)

    def clear_fault(self) -> None:
        """Stop misbehaving."""
        with self._lock:
            self._fault = None
        log.info("sim_fault_cleared", kind=self.kind)

    def reject_keys(self, keys: Iterable[str]) -> None:
        """Refuse writes with these idempotency keys (422), e.g. an unknown consignee.

        The document itself is the problem, not the load: the client must not retry,
        and the unit is dead-lettered until the reference data is fixed — which
        ``reject_keys(())`` simulates.
        """
        with self._lock:
            self._rejected = frozenset(keys)
        log.info("sim_reject_keys", kind=self.kind, keys=len(self._rejected))

    def set_commit_at_end(self, enabled: bool = True) -> None:
        """Record an accepted write when its service time is over, not when it is admitted.

        A downstream that commits at the end of a slow request cannot confirm it by
        lookup while the request runs — also when the client has given up waiting: the
        write is still committed when the request finishes. A sender that asks too early
        hears "not received" and sends again. Writes already in service keep the mode
        they were admitted under; :meth:`reset` leaves the mode in place (it is part of
        what the downstream is, not of its state).
        """
        with self._lock:
            self._commit_at_end = bool(enabled)
        log.info("sim_commit_mode", kind=self.kind, commit="at_end" if enabled else "on_admit")

    def set_stragglers(self, service_s: float, *, count: int, every: int = 1) -> None:
        """Make ``count`` of the next accepted writes take ``service_s`` — one in ``every``.

        A straggler is a request the downstream is slow to finish (a lock, a slow
        disk) while the others go through: it holds its connection for ``service_s``
        and, with :meth:`set_commit_at_end`, is recorded only then. Replaces earlier
        stragglers still due; :meth:`reset` clears them.
        """
        check_positive("service_s", service_s)
        if count < 1 or every < 1:
            raise ConfigurationError(f"count and every must be >= 1, got {count!r}, {every!r}")
        with self._lock:
            self._stragglers = _Stragglers(service_s, every, count)
        log.info(
            "sim_stragglers_set", kind=self.kind, service_s=service_s, count=count, every=every
        )

    def _straggle(self, service_s: float) -> float:
        """The service time of a write being admitted: a straggler's, or its own."""
        stragglers = self._stragglers
        if stragglers is None:
            return service_s
        stragglers.seen += 1
        if stragglers.seen % stragglers.every:
            return service_s
        stragglers.remaining -= 1
        if stragglers.remaining == 0:
            self._stragglers = None
        return stragglers.service_s

    def set_document_check(self, check: DocumentCheck | None) -> None:
        """Validate every write's JSON body with ``check``, as a real gateway would.

        ``check(body)`` returns ``None`` for a document the downstream takes, or a
        snake_case code (``"truncated_message"``, ``"not_edifact"``…) for one it
        refuses: the write is answered ``400 {"error": <code>}`` and never recorded.
        It runs in the handler thread, outside the sim lock, before admission (a
        refused document costs no token). ``None`` removes the check; :meth:`reset`
        leaves it in place (it is part of what the downstream is, not of its state).
        """
        self._document_check = check
        log.info("sim_document_check", kind=self.kind, enabled=check is not None)

    def set_outage(
        self, seconds: float | None, *, mode: OutageMode = "503", retry_after: bool = False
    ) -> None:
        """Go down for ``seconds`` (``None``: until :meth:`end_outage`).

        Args:
            seconds: the outage length. A ``503`` outage is timed on the sim clock; a
                ``refuse`` outage on a real timer, because a thread must reopen the port.
            mode: ``"503"`` answers every write 503 (control endpoints keep working);
                ``"refuse"`` closes the listening socket and resets open connections,
                then rebinds the same port when the outage ends.
            retry_after: with ``"503"``, send ``Retry-After`` = the remaining seconds.
        """
        if mode not in OUTAGE_MODES:
            raise ConfigurationError(f"outage mode must be one of {sorted(OUTAGE_MODES)}")
        _positive_or_none("seconds", seconds)
        if mode == "503":
            with self._lock:
                until = None if seconds is None else self._clock() + seconds
                self._outage = _Outage("503", until, retry_after)
        else:
            with self._life_lock:
                if not self._started:
                    raise RuntimeError(f"{self.kind} sim is not started")
                self._cancel_reopen()
                self._refusing = True
                self._close()
                if seconds is not None:
                    timer = threading.Timer(seconds, self._reopen_after_timer)
                    timer.daemon = True
                    timer.start()
                    self._reopen_timer = timer
        log.warning("sim_outage_started", kind=self.kind, mode=mode, seconds=seconds)

    def end_outage(self) -> None:
        """End any outage now; after ``refuse``, the same port is bound again."""
        with self._lock:
            self._outage = None
        with self._life_lock:
            self._cancel_reopen()
            was_refusing, self._refusing = self._refusing, False
            if was_refusing and self._started:
                try:
                    self._open()
                except OSError:
                    self._refusing = True
                    raise
        log.info("sim_outage_ended", kind=self.kind)

    def _reopen_after_timer(self) -> None:
        try:
            self.end_outage()
        except OSError:
            log.exception("sim_reopen_failed", kind=self.kind, port=self._port)

    # -- request handling (called by the handler threads) ----------------------------

    def _active_outage(self, now: float) -> _Outage | None:
        outage = self._outage
        if outage is not None and outage.until is not None and now >= outage.until:
            self._outage = outage = None
        return outage

    def _active_fault(self, now: float) -> _Fault | None:
        fault = self._fault
        if fault is not None and (
            (fault.until is not None and now >= fault.until) or fault.remaining == 0
        ):
            self._fault = fault = None
        return fault

    @staticmethod
    def _consume(fault: _Fault) -> None:
        if fault.remaining is not None:
            fault.remaining -= 1

    def _handle_write(self, content_type: str, key: str | None, body: bytes) -> Reply:
        problem = _validate_write(content_type, key, body)
        check = self._document_check
        if problem is None and check is not None:
            code = check(json.loads(body))
            if code is not None:
                problem = json_reply(400, {"error": code})
        with self._lock:
            self._in_flight += 1
            self._recorder.arrived(self._in_flight)
            now = self._clock()
            commit_at_end = self._commit_at_end
            reply, service_s, admitted = self._decide(now, key, problem, defer=commit_at_end)
            self._recorder.answered(reply.status, now)
        try:
            if service_s > 0:
                self._sleep(service_s)
        finally:
            with self._lock:
                self._in_flight -= 1
                if admitted:
                    self._admitted_in_flight -= 1
                    self._recorder.served(now, self._clock())
                    if commit_at_end:
                        assert key is not None
                        self._recorder.accepted(key, self._clock())
        return reply

    def _decide(
        self, now: float, key: str | None, problem: Reply | None, *, defer: bool = False
    ) -> tuple[Reply, float, bool]:
        """Answer one write; called under ``_lock``. Returns (reply, service_s, admitted).

        With ``defer`` an admitted write is not recorded here: the caller records it when
        its service time is over (commit at the end of the request).
        """
        headers = self._extra_headers()
        outage = self._active_outage(now)
        if outage is not None:
            if outage.retry_after and outage.until is not None:
                headers["Retry-After"] = str(max(1, math.ceil(outage.until - now)))
            return json_reply(503, {"error": "outage"}, headers), 0.0, False
        fault = self._active_fault(now)
        if fault is not None and fault.mode != "200_not_json":
            self._consume(fault)
            return _fault_reply(fault.mode, headers), 0.0, False
        if problem is not None:
            problem.headers.update(headers)
            return problem, 0.0, False
        assert key is not None
        if key in self._rejected:
            return json_reply(422, {"error": "unknown_reference"}, headers), 0.0, False
        verdict = self._admit(now)
        if verdict.status != 200:
            if verdict.retry_after_s is not None:
                headers["Retry-After"] = self._format_retry_after(now, verdict.retry_after_s)
            return json_reply(verdict.status, {"error": verdict.reason}, headers), 0.0, False
        duplicate = self._recorder.lookup(key, count=False) if defer else None
        if duplicate is None:
            duplicate = self._recorder.accepted(key, now)
        self._admitted_in_flight += 1
        service_s = self._straggle(verdict.service_s)
        if fault is not None:
            self._consume(fault)
            html = b"<html><body>gateway ok</body></html>"
            return Reply(200, html, "text/html", headers), service_s, True
        body = {"status": "accepted", "idempotency_key": key, "duplicate": duplicate}
        return json_reply(200, {**body, **verdict.extra}, headers), service_s, True

    def _handle_lookup(self, key: str) -> Reply:
        """Answer ``GET <path>/<key>``: was a write with this key ever accepted?

        A real gateway answers this from its own records (a customs single window
        looks a declaration up by its reference); it is how a sender that crashed
        between sending and recording learns whether to send again. Lookups are not
        writes: they take no admission token and never count as an accept.
        """
        with self._lock:
            if self._active_outage(self._clock()) is not None:
                return json_reply(503, {"error": "outage"}, self._extra_headers())
            found = self._recorder.lookup(key)
        if found:
            return json_reply(200, {"status": "accepted", "idempotency_key": key})
        return json_reply(404, {"error": "unknown_idempotency_key"})

    def _handle_stray(self) -> Reply:
        with self._lock:
            self._recorder.answered(404)
        return json_reply(404, {"error": "not_found"})

    def _handle_control(
        self, method: str, path: str, body: bytes
    ) -> tuple[Reply, Callable[[], None] | None]:
        """Serve a control endpoint; the callable returned runs after the reply is sent."""
        handler = {
            ("POST", "/reset"): self._control_reset,
            ("POST", "/fault"): self._control_fault,
            ("DELETE", "/fault"): self._control_clear_fault,
            ("POST", "/outage"): self._control_outage,
            ("DELETE", "/outage"): self._control_end_outage,
        }.get((method, path))
        if handler is None:
            return json_reply(404, {"error": "not_found"}), None
        try:
            args = json.loads(body) if body.strip() else {}
            if not isinstance(args, dict):
                raise TypeError("expected a JSON object")
            return handler(args)
        except (ValueError, TypeError, KeyError) as exc:
            return json_reply(400, {"error": "bad_control_request", "detail": str(exc)}), None

    def _control_reset(self, args: dict[str, Any]) -> tuple[Reply, None]:
        self.reset()
        return json_reply(200, {"reset": True}), None

    def _control_fault(self, args: dict[str, Any]) -> tuple[Reply, None]:
        self.set_fault(args["mode"], count=args.get("count"), seconds=args.get("seconds"))
        return json_reply(202, {"fault": args["mode"]}), None

    def _control_clear_fault(self, args: dict[str, Any]) -> tuple[Reply, None]:
        self.clear_fault()
        return json_reply(200, {"fault": None}), None

    def _control_outage(self, args: dict[str, Any]) -> tuple[Reply, Callable[[], None] | None]:
        mode = args.get("mode", "503")
        seconds = args.get("seconds")
        reply = json_reply(202, {"outage": mode, "seconds": seconds})
        if mode == "refuse":
            _positive_or_none("seconds", seconds)

            def refuse() -> None:
                # Runs after the reply is sent: the outage resets this very connection.
                self.set_outage(seconds, mode="refuse")

            return reply, refuse
        self.set_outage(seconds, mode=mode, retry_after=bool(args.get("retry_after", False)))
        return reply, None

    def _control_end_outage(self, args: dict[str, Any]) -> tuple[Reply, None]:
        self.end_outage()
        return json_reply(200, {"outage": None}), None

    # -- what a concrete sim defines -------------------------------------------------

    @abstractmethod
    def _admit(self, now: float) -> Verdict:
        """Decide on one well-formed write at ``now``; called under the sim lock.

        ``self._admitted_in_flight`` is the number of accepted writes still in service.
        """

    def _reset_policy(self, now: float) -> None:  # noqa: B027 - an optional hook
        """Return the admission state to its initial value; called under the sim lock."""

    def _policy_stats(self, now: float) -> dict[str, Any]:
        """Settings and state added to :meth:`stats`; called under the sim lock."""
        return {}

    def _extra_headers(self) -> dict[str, str]:
        """Headers sent with every answer on the write path."""
        return {}

    def _format_retry_after(self, now: float, seconds: int) -> str:
        """The ``Retry-After`` value for a refusal: delay-seconds by default."""
        return str(seconds)


def _validate_write(content_type: str, key: str | None, body: bytes) -> Reply | None:
    if content_type != "application/json" and not content_type.endswith("+json"):
        return json_reply(415, {"error": "unsupported_media_type"})
    try:
        json.loads(body)
    except ValueError:
        return json_reply(400, {"error": "invalid_json"})
    if key is None or not key.strip():
        return json_reply(400, {"error": "missing_idempotency_key"})
    if len(key) > _MAX_KEY_LENGTH:
        return json_reply(400, {"error": "invalid_idempotency_key"})
    return None


def _fault_reply(mode: FaultMode, headers: dict[str, str]) -> Reply:
    if mode == "503":
        return json_reply(503, {"error": "unavailable"}, headers)
    if mode == "422":
        return json_reply(422, {"error": "document_rejected"}, headers)
    if mode == "429_bad_retry_after":
        headers["Retry-After"] = BAD_RETRY_AFTER
    elif mode == "429_huge_retry_after":
        headers["Retry-After"] = str(HUGE_RETRY_AFTER_S)
    return json_reply(429, {"error": "rate_limited"}, headers)
