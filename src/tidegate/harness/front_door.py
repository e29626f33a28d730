"""The demo's front door: the vessel burst posted by concurrent senders to a real intake.

Instead of publishing from Python, ``tidegate demo`` starts the intake service
(:func:`tidegate.intake.create_app` under uvicorn, in this process, on a free loopback
port) and a few sender threads post the burst's interchanges to it over HTTP, as
shipping lines and agents would. Each sender honours the service's answers: a 503 is
waited out for its ``Retry-After`` and posted again; a 202 is an acknowledgement (every
unit is on the broker by then). At the end a few interchanges already acknowledged are
sent again on purpose, to show them refused as duplicates (409, CONTRL code 26).

The run reconciles by the keys the intake gives the units, which a sender can compute
itself from what it posts (:func:`intake_keys`, the intake's own reading).

The demo's admission sheds nothing (an empty shedding policy): above a queue's HWM the
senders are told to retry, so every document ends delivered, not quarantined.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import redis

from tidegate._redis import unwritable_cause
from tidegate.errors import BackendUnwritable, ConfigurationError
from tidegate.intake import (
    AdmissionPublisher,
    IntakePipeline,
    RedisDuplicates,
    create_app,
    read_interchange,
)
from tidegate.keys import Keyspace
from tidegate.load.admission import Admission
from tidegate.load.shedding import SheddingPolicy
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from tidegate.harness.scenarios.vessel import RunHandles, Submission

__all__ = [
    "DEFAULT_RESENDS",
    "DEFAULT_SENDERS",
    "DEMO_RETRY_AFTER_S",
    "MAX_RETRIES",
    "Posting",
    "demo_pipeline",
    "intake_keys",
    "keyed_by_intake",
    "post_burst",
    "serve_in_thread",
    "submit_through_front_door",
]

log = get_logger("tidegate.ops")

#: Sender threads posting at once: a berth's burst comes from many shipping lines and
#: agents. With 4 the intake fed the TOS slower than its connections drain (its busy
#: share was then the senders', not the gate's); 16 keep a backlog in front of it.
DEFAULT_SENDERS = 16
#: Interchanges sent a second time on purpose (each must be refused as a duplicate).
DEFAULT_RESENDS = 5
#: The demo intake's ``Retry-After``: short, so a saturated run shows retries, not waits.
DEMO_RETRY_AFTER_S = 1


def intake_keys(body: bytes) -> list[str]:
    """The idempotency keys the intake gives the units of ``body`` (its own reading)."""
    return [unit.key for unit in read_interchange(body).units]


def demo_pipeline(
    client: redis.Redis,
    prefix: str,
    producer: Any,
    tasks: Mapping[str, str],
    *,
    max_payload_bytes: int,
) -> IntakePipeline:
    """The intake of a demo run: the run's Celery producer, Redis and key prefix."""
    admission = Admission.for_celery(
        producer,
        tasks,
        client=client,
        prefix=prefix,
        policy=SheddingPolicy(sheddable=frozenset()),
        max_payload_bytes=max_payload_bytes,
    )
    return IntakePipeline(
        duplicates=RedisDuplicates(client, prefix=prefix),
        publisher=AdmissionPublisher(admission),
        retry_after_s=DEMO_RETRY_AFTER_S,
    )


@contextlib.contextmanager
def serve_in_thread(pipeline: IntakePipeline, *, ready_timeout_s: float = 15.0) -> Iterator[str]:
    """Serve ``pipeline`` anonymously on a free loopback port; yields the base URL.

    Raises:
        ConfigurationError: the server did not start within ``ready_timeout_s``.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(pipeline, allow_anonymous=True),
        log_config=None,
        access_log=False,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="demo-intake", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + ready_timeout_s
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise ConfigurationError("the demo's intake service did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10.0)
        sock.close()
        pipeline.close()  # its publishing thread (the server runs without lifespan)


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Posting:
    """What the senders saw (the report's ``intake`` entry is :meth:`report`).

    Attributes:
        statuses: HTTP status → answers.
        ack_ms: the latency of every 202, ms (request sent → acknowledgement read).
        refused: indexes of the bodies answered 413 (too large; not retried).
        failed: indexes of the bodies answered anything else unexpected.
        resent: interchanges sent a second time on purpose.
    """

    statuses: Counter[int] = field(default_factory=Counter)
    ack_ms: list[float] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    resent: int = 0
    senders: int = 0
    elapsed_s: float = 0.0
    #: Set when the run's Redis refuses writes: every sender stops, the run ends with it.
    error: BackendUnwritable | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, status: int, index: int, ack_ms: float | None) -> None:
        with self._lock:
            self.statuses[status] += 1
            if ack_ms is not None:
                self.ack_ms.append(ack_ms)
            if status == 413:
                self.refused.append(index)
            elif status not in (202, 409, 503):
                self.failed.append(index)

    def give_up(self, index: int) -> None:
        with self._lock:
            self.failed.append(index)

    def report(self) -> dict[str, Any]:
        p50, p99 = _percentile(self.ack_ms, 0.50), _percentile(self.ack_ms, 0.99)
        return {
            "posted": sum(self.statuses.values()),
            "acknowledged": self.statuses[202],
            "duplicates_rejected": self.statuses[409],
            "retry_after": self.statuses[503],
            "refused": self.statuses[413],
            "failed": len(self.failed),
            "ack_p50_ms": round(p50, 1) if p50 is not None else None,
            "ack_p99_ms": round(p99, 1) if p99 is not None else None,
            "senders": self.senders,
            "resent_on_purpose": self.resent,
            "post_s": round(self.elapsed_s, 3),
        }


#: 503s in a row after which a demo sender gives up on an interchange (it is then
#: ``failed`` in the report and ``lost`` in the reconciliation, never silently dropped).
MAX_RETRIES = 120


def _post_one(
    client: httpx.Client,
    url: str,
    body: bytes,
    index: int,
    posting: Posting,
    *,
    probe: Callable[[], None] | None = None,
) -> int:
    """Post until the answer is not 503 (waiting out each Retry-After); the final status.

    A 503 because the intake's Redis failed is checked with ``probe``: a Redis that
    refuses writes (memory full) will not recover by itself within the run, so the run
    stops with it rather than retrying every interchange for minutes.
    """
    for _ in range(MAX_RETRIES + 1):
        if posting.error is not None:
            return 503
        start = time.perf_counter()
        try:
            response = client.post(url, content=body)
        except httpx.TransportError as exc:
            log.warning("demo_sender_transport_error", index=index, error=type(exc).__name__)
            posting.record(0, index, None)
            return 0
        took_ms = (time.perf_counter() - start) * 1000
        status = response.status_code
        posting.record(status, index, took_ms if status == 202 else None)
        if status != 503:
            return status
        if probe is not None and _reason(response) == "backend_unavailable":
            try:
                probe()
            except BackendUnwritable as exc:
                posting.error = exc
                return 503
        # The sender's side of backpressure: wait as told, then send the same bytes again.
        time.sleep(float(response.headers.get("retry-after", DEMO_RETRY_AFTER_S)))
    log.warning("demo_sender_gave_up", index=index, retries=MAX_RETRIES)
    posting.give_up(index)
    return 503


def post_burst(
    base_url: str,
    bodies: Sequence[bytes],
    *,
    senders: int = DEFAULT_SENDERS,
    resends: int = DEFAULT_RESENDS,
    probe: Callable[[], None] | None = None,
) -> Posting:
    """Post every body once (``senders`` threads, body ``i`` by sender ``i % senders``),
    then resend the first ``resends`` acknowledged ones, which must come back 409."""
    url = f"{base_url}/interchanges"
    posting = Posting(senders=senders)
    acknowledged: list[int] = []
    lock = threading.Lock()

    def sender(number: int) -> None:
        with httpx.Client(timeout=60.0) as client:
            for index in range(number, len(bodies), senders):
                if posting.error is not None:
                    return
                if _post_one(client, url, bodies[index], index, posting, probe=probe) == 202:
                    with lock:
                        acknowledged.append(index)

    start = time.monotonic()
    threads = [
        threading.Thread(target=sender, args=(n,), name=f"demo-sender-{n}") for n in range(senders)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if posting.error is not None:
        raise posting.error
    with httpx.Client(timeout=60.0) as client:
        for index in sorted(acknowledged)[:resends]:
            posting.resent += 1
            _post_one(client, url, bodies[index], index, posting)
    posting.elapsed_s = time.monotonic() - start
    return posting


def keyed_by_intake(submissions: Sequence[Submission]) -> list[Submission]:
    """The burst's submissions under the keys the intake will give their units."""
    keyed = []
    for item in submissions:
        (key,) = intake_keys(str(item.envelope["body"]).encode("latin-1"))
        keyed.append(dataclasses.replace(item, key=key, envelope={**item.envelope, "key": key}))
    return keyed


def submit_through_front_door(
    run: RunHandles, producer: Any, tasks: Mapping[str, str]
) -> dict[str, Any]:
    """Post the run's submissions to an intake started for the run; the ``intake`` report.

    A body the intake refuses as too large (413) joins ``run.refused``, as the direct
    path's payload check would have put it.
    """
    pipeline = demo_pipeline(
        run.client, run.prefix, producer, tasks, max_payload_bytes=run.config.max_payload_bytes
    )
    bodies = [str(item.envelope["body"]).encode("latin-1") for item in run.submissions]
    with serve_in_thread(pipeline) as url:
        posting = post_burst(url, bodies, probe=lambda: _probe_writable(run.client, run.prefix))
    run.refused.extend(run.submissions[i] for i in sorted(set(posting.refused)))
    report = posting.report()
    log.info("demo_front_door", **{k: v for k, v in report.items() if k != "senders"})
    return report


def _reason(response: httpx.Response) -> str | None:
    """The intake's ``reason`` for an answer, when its body is the intake's JSON."""
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("reason") if isinstance(body, dict) else None


def _probe_writable(client: redis.Redis, prefix: str) -> None:
    """Raise :class:`BackendUnwritable` when Redis refuses a write (one key that expires
    at once); any other failure is left to the intake's own retry answer."""
    try:
        client.set(Keyspace(prefix).demo_write_probe(), b"1", px=1)
    except redis.RedisError as exc:
        cause = unwritable_cause(exc)
        if cause is not None:
            raise BackendUnwritable(cause, "the demo's front door") from exc
