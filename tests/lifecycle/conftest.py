"""Four engines behind one harness, so one behaviour suite runs over all of them.

- ``memory``: the lifecycle's driver with an in-memory engine (``memory_engine.py``),
  a memory-backed gate, and the memory twins of the DLQ and the parking lot
  (``tidegate.load.memory``); the ledger is still the real Redis store (it has no
  memory twin yet);
- ``celery``: real ``celery worker`` processes on the Redis broker;
- ``celery-amqp``: the same Celery harness with RabbitMQ as the broker (a vhost of
  its own on the session's RabbitMQ, the project's AMQP preset: quorum queues,
  publisher confirms); Redis still holds the gate, ledger, parking, DLQ and results;
- ``rq``: real ``rq worker`` processes of tidegate's ``JsonWorker``.

Every engine delivers to a real customs sim on loopback and shares its stores with
the test (``engine.dlq``; the real-worker engines' are tidegate's Redis state under
the test's prefix). Worker processes
are started per test (the real-worker variants are few) and killed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import psutil
import pytest
import redis
from celery import Celery
from click.testing import CliRunner
from rq.job import Job
from rq.registry import StartedJobRegistry

from tidegate.cli import cli
from tidegate.delivery import LifecyclePolicy, Stores, deliver
from tidegate.downstream import DownstreamClient
from tidegate.flow import Gate
from tidegate.flow.backends.memory import MemoryBackend
from tidegate.harness.polling import wait_for
from tidegate.harness.run_broker import AmqpRunBroker, open_amqp_broker
from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.integrations.celery.gated import ATTEMPT_HEADER, FIRST_FAILED_HEADER
from tidegate.integrations.rq import JsonSerializer, dead_letter_handler, json_queue
from tidegate.integrations.rq.engine import ATTEMPT_META, FIRST_FAILED_META
from tidegate.load import DeadLetterQueue, DeliveryLedger, ParkingLot
from tidegate.load.memory import MemoryDeadLetterQueue, MemoryParkingLot
from tidegate.load.protocols import DeadLetterStore
from tidegate.load.replay import replay_dead_letters
from tidegate.sim import CustomsSim

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from lifecycle_jobs import LOOKUP, MAX_WAIT_S, POLICY, REQUIRED  # noqa: E402
from memory_engine import MemoryEngine, WorkerKilled, unit_of, unit_of_letter  # noqa: E402

ENGINES = ("memory", "celery", "celery-amqp", "rq")
#: How long a real worker may take to settle one unit (2 shared CPUs, cold imports).
SETTLE_S = 90.0


class EngineHarness(Protocol):
    """What the behaviour suite asks of an engine."""

    name: str
    gate: Gate
    #: Where the engine's dead letters go (Redis, or the memory twin).
    dlq: DeadLetterStore

    def run(
        self, envelope: Mapping[str, Any], *, attempt: int = 0, first_failed_at: float | None = None
    ) -> Any:
        """Deliver one unit; return its outcome once it settled (delivered, skipped,
        parked or dead-lettered)."""

    def run_killed_mid_call(self, envelope: Mapping[str, Any], release: threading.Event) -> Any:
        """Deliver one unit, kill the worker once the downstream took the call, let
        the engine recover the unit; return the recovered run's outcome."""

    def replay(self, key: str) -> None:
        """``tidegate dlq replay`` and run what it republished until ``key`` settled."""

    def parked(self) -> list[str]:
        """Keys of the units the engine parked."""


class Straggler:
    """The sim's service time, held on an event: a call can be kept in flight until
    the test lets it go (no wall-clock race)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.release.wait(seconds)


@pytest.fixture
def straggler() -> Iterator[Straggler]:
    held = Straggler()
    yield held
    held.release.set()


@pytest.fixture
def sim(straggler: Straggler) -> Iterator[CustomsSim]:
    with CustomsSim(rate=500, burst=50, sleep=straggler.sleep) as customs:
        yield customs


class MemoryHarness:
    name = "memory"

    def __init__(self, client: redis.Redis, prefix: str, sim: CustomsSim) -> None:
        self.gate = Gate(MemoryBackend(), "customs", prefix=prefix)
        self.gate.configure(rate=100, burst=10)
        self.http = DownstreamClient("customs", sim.url, feedback=self.gate)
        self.dlq = MemoryDeadLetterQueue()
        self.lot = MemoryParkingLot()
        self.stores = Stores(self.gate, DeliveryLedger(client, prefix=prefix), self.dlq)
        self.policy = LifecyclePolicy(max_wait_s=MAX_WAIT_S, retry=POLICY)
        self.engine = MemoryEngine(
            body=lambda envelope: self.http.send(
                LOOKUP, envelope, idempotency_key=str(envelope["key"])
            ),
            confirm=lambda key: self.http.lookup(LOOKUP, idempotency_key=key) is not None,
            required_fields=REQUIRED,
            lot=self.lot,
        )

    def run(
        self, envelope: Mapping[str, Any], *, attempt: int = 0, first_failed_at: float | None = None
    ) -> Any:
        unit = unit_of(envelope, attempt=attempt, first_failed_at=first_failed_at)
        return deliver(self.engine, unit, self.stores, self.policy)

    def run_killed_mid_call(self, envelope: Mapping[str, Any], release: threading.Event) -> Any:
        self.engine.die_after_call = True
        release.set()  # the call itself returns; the worker dies right after it
        with pytest.raises(WorkerKilled):
            deliver(self.engine, unit_of(envelope), self.stores, self.policy)
        return deliver(self.engine, unit_of(envelope, redelivered=True), self.stores, self.policy)

    def replay(self, key: str) -> None:
        republished = []
        replay_dead_letters(self.dlq, republished.append)
        for letter in republished:
            deliver(self.engine, unit_of_letter(letter), self.stores, self.policy)
        assert self.dlq.get(key) is None

    def parked(self) -> list[str]:
        return [key for page in self.lot.iter_keys(100) for key in page]

    def close(self) -> None:
        self.http.close()


class _Processes:
    """Worker processes of one test, each in its own session, killed at the end."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"worker-{len(self.procs)}.log").open("ab")
        proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and its children: nothing of it runs any cleanup.

        The children are found and killed one by one as well as the group: RQ puts its
        work horse in a process group of its own, so killing the worker's group alone
        left the horse running its job to the end — and the job, finished, was no
        longer there for RQ's recovery to give back (a flaky failure under load).
        """
        children = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"processes of the killed worker still running: {alive}"

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in self.log_dir.glob("worker-*.log")
        )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _cli_replay(redis_url: str, prefix: str, broker_url: str | None = None) -> None:
    broker = ["--broker-url", broker_url] if broker_url else []
    result = CliRunner().invoke(
        cli,
        ["dlq", "replay", "--prefix", prefix, "--rate", "100", *broker],
        env={"TIDEGATE_REDIS_URL": redis_url},
    )
    assert result.exit_code == 0, result.output
    assert "replayed 1 dead letter(s)" in result.output, result.output


class CeleryHarness:
    """Real Celery workers; on Redis as the broker, or on a RabbitMQ vhost (``amqp``).

    The engine's name is ``celery`` on either broker (it is what a dead letter records);
    only the way a killed worker's message comes back differs (``_recovered``).
    """

    name = "celery"

    def __init__(
        self,
        redis_url: str,
        client: redis.Redis,
        prefix: str,
        sim: CustomsSim,
        log_dir: Path,
        *,
        amqp: AmqpRunBroker | None = None,
    ) -> None:
        self.url, self.client, self.prefix = redis_url, client, prefix
        self.amqp = amqp
        broker_url = amqp.url if amqp is not None else redis_url
        self.broker_url = broker_url
        self.queue = f"{prefix}-lifecycle"
        self.gate = Gate(client, "customs", prefix=prefix)
        self.gate.configure(rate=100, burst=10)
        self.dlq = DeadLetterQueue(client, prefix=prefix)
        self.workers = _Processes(
            {
                "TIDEGATE_REDIS_URL": redis_url,
                "TIDEGATE_PREFIX": prefix,
                "TIDEGATE_CUSTOMS_URL": sim.url,
                "LIFECYCLE_QUEUE": self.queue,
                **({"TIDEGATE_BROKER_URL": broker_url} if amqp is not None else {}),
            },
            log_dir,
        )
        producer = Celery("lifecycle-test", broker=broker_url, backend=redis_url)
        if amqp is None:
            producer.conf.broker_transport_options = {"visibility_timeout": 10}
        preset = CeleryPreset(
            soft_time_limit_s=4, hard_time_limit_s=5, queues=(self.queue,), routes={}
        )
        self.producer = configure(producer, preset)
        self.worker: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        name = f"lifecycle-{uuid.uuid4().hex[:8]}@%h"
        self.worker = self.workers.start(
            [
                sys.executable,
                *("-m", "celery", "-A", "lifecycle_jobs", "worker", "-Q", self.queue),
                *("-c", "1", "-n", name, "-l", "WARNING"),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            ]
        )
        return self.worker

    def _send(self, envelope: Mapping[str, Any], headers: dict[str, Any]) -> Any:
        if self.worker is None:
            self._start()
        return self.producer.send_task(
            "lifecycle.lodge", args=[dict(envelope)], queue=self.queue, headers=headers
        )

    def run(
        self, envelope: Mapping[str, Any], *, attempt: int = 0, first_failed_at: float | None = None
    ) -> Any:
        headers: dict[str, Any] = {ATTEMPT_HEADER: attempt}
        if first_failed_at is not None:
            headers[FIRST_FAILED_HEADER] = first_failed_at
        return self._send(envelope, headers).get(timeout=SETTLE_S, propagate=True)

    def run_killed_mid_call(self, envelope: Mapping[str, Any], release: threading.Event) -> Any:
        result = self._send(envelope, {})
        key = str(envelope["key"])
        sim_keys = self._sim_keys
        wait_for(lambda: key in sim_keys(), SETTLE_S, "the downstream took the call")
        assert self.worker is not None
        self.workers.kill(self.worker)
        release.set()
        self._recovered()
        self._start()
        return result.get(timeout=SETTLE_S, propagate=True)

    def _recovered(self) -> None:
        """How the killed worker's message comes back: the broker's own mechanism.

        On Redis it stays in kombu's ``unacked`` hash until its visibility timeout
        passed, and the next worker's restore sweep puts it back. RabbitMQ requeues
        an unacknowledged delivery as soon as the consumer's connection closes — the
        message is ready again (to be redelivered with ``redelivered=True``) before any
        worker runs.
        """
        if self.amqp is None:
            return
        from tidegate.integrations.celery.depth import AmqpDepthProbe

        probe = AmqpDepthProbe(self.amqp.url, management_url=self.amqp.management_url)
        try:
            wait_for(
                lambda: probe.sample([self.queue])[self.queue].ready == 1,
                SETTLE_S,
                "RabbitMQ requeued the killed worker's delivery",
            )
        finally:
            probe.close()

    def replay(self, key: str) -> None:
        if self.worker is None:
            self._start()
        _cli_replay(self.url, self.prefix, self.broker_url if self.amqp is not None else None)
        wait_for(lambda: self.dlq.get(key) is None, SETTLE_S, "the replayed letter resolved")

    def parked(self) -> list[str]:
        lot = ParkingLot(self.client, prefix=self.prefix)
        return [key for page in lot.iter_keys(100) for key in page]

    _sim_keys: Callable[[], list[str]]

    def close(self) -> None:
        self.workers.stop()
        self.producer.close()
        if self.amqp is not None:
            self.amqp.close()  # deletes the vhost: its queues and any message left


class RqHarness:
    name = "rq"

    def __init__(
        self, redis_url: str, client: redis.Redis, prefix: str, sim: CustomsSim, log_dir: Path
    ) -> None:
        self.url, self.client, self.prefix = redis_url, client, prefix
        self.queue = json_queue(f"{prefix}-lifecycle", client)
        self.gate = Gate(client, "customs", prefix=prefix)
        self.gate.configure(rate=100, burst=10)
        self.dlq = DeadLetterQueue(client, prefix=prefix)
        self.workers = _Processes(
            {
                "TIDEGATE_REDIS_URL": redis_url,
                "TIDEGATE_PREFIX": prefix,
                "TIDEGATE_CUSTOMS_URL": sim.url,
            },
            log_dir,
        )
        self.jobs: list[str] = []

    def _worker(self, *, burst: bool) -> subprocess.Popen[bytes]:
        return self.workers.start(
            [
                sys.executable,
                *("-m", "rq.cli", "worker", "--url", self.url, "-q"),
                *("--worker-class", "tidegate.integrations.rq.JsonWorker"),
                *("--exception-handler", "tidegate.integrations.rq.dead_letter_handler"),
                *(["--burst"] if burst else []),
                self.queue.name,
            ]
        )

    def _drain(self) -> None:
        proc = self._worker(burst=True)
        assert proc.wait(timeout=SETTLE_S) == 0, self.workers.logs()

    def _outcome(self, job_id: str) -> Any:
        job = Job.fetch(job_id, connection=self.client, serializer=JsonSerializer)
        return job.return_value()

    def run(
        self, envelope: Mapping[str, Any], *, attempt: int = 0, first_failed_at: float | None = None
    ) -> Any:
        meta: dict[str, Any] = {ATTEMPT_META: attempt}
        if first_failed_at is not None:
            meta[FIRST_FAILED_META] = first_failed_at
        job = self.queue.enqueue("lifecycle_jobs.rq_lodge", dict(envelope), meta=meta)
        self.jobs.append(job.id)
        self._drain()
        return self._outcome(job.id)

    def run_killed_mid_call(self, envelope: Mapping[str, Any], release: threading.Event) -> Any:
        job = self.queue.enqueue("lifecycle_jobs.rq_lodge", dict(envelope))
        self.jobs.append(job.id)
        worker = self._worker(burst=False)
        key = str(envelope["key"])
        sim_keys = self._sim_keys
        wait_for(lambda: key in sim_keys(), SETTLE_S, "the downstream took the call")
        self.workers.kill(worker)
        release.set()
        # What every worker's maintenance does once the dead worker's heartbeat has
        # expired (>= 60 s in RQ): the time is an input, the code path RQ's own.
        StartedJobRegistry(
            self.queue.name, connection=self.client, serializer=JsonSerializer
        ).cleanup(timestamp=time.time() + 3600, exception_handlers=[dead_letter_handler])
        assert self.queue.count == 1, "RQ did not put the abandoned job back"
        self._drain()
        return self._outcome(job.id)

    def replay(self, key: str) -> None:
        _cli_replay(self.url, self.prefix)
        self._drain()
        wait_for(lambda: self.dlq.get(key) is None, SETTLE_S, "the replayed letter resolved")

    def parked(self) -> list[str]:
        keys = []
        for job_id in self.queue.scheduled_job_registry.get_job_ids():
            job = Job.fetch(job_id, connection=self.client, serializer=JsonSerializer)
            keys.append(str(job.args[0]["key"]))
        return keys

    _sim_keys: Callable[[], list[str]]

    def close(self) -> None:
        self.workers.stop()
        for key in list(self.client.scan_iter(match="rq:job:*", count=1000)):
            if (self.client.hget(key, "origin") or b"").decode().startswith(self.prefix):
                self.client.delete(key)
        keys = list(self.client.scan_iter(match=f"rq:*{self.prefix}*", count=1000))
        if keys:
            self.client.delete(*keys)


@pytest.fixture(params=ENGINES)
def engine(  # noqa: PLR0917 - pytest passes fixtures positionally
    request: pytest.FixtureRequest,
    redis_url: str,
    redis_client: redis.Redis,
    prefix: str,
    sim: CustomsSim,
    tmp_path: Path,
) -> Iterator[Any]:
    """One engine, with the sim and the test's Redis prefix."""
    harness: Any
    if request.param == "memory":
        harness = MemoryHarness(redis_client, prefix, sim)
    elif request.param == "celery":
        harness = CeleryHarness(redis_url, redis_client, prefix, sim, tmp_path)
    elif request.param == "celery-amqp":
        # The session's RabbitMQ (skips locally, fails under CI=true when it is missing),
        # and a vhost of this test's own on it.
        amqp = open_amqp_broker(
            request.getfixturevalue("rabbitmq_url"),
            management_url=request.getfixturevalue("rabbitmq_management_url"),
        )
        try:
            harness = CeleryHarness(redis_url, redis_client, prefix, sim, tmp_path, amqp=amqp)
        except BaseException:
            amqp.close()
            raise
    else:
        harness = RqHarness(redis_url, redis_client, prefix, sim, tmp_path)
    harness._sim_keys = sim.accepted_keys
    try:
        yield harness
    finally:
        harness.close()
