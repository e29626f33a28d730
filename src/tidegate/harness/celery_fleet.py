"""Real Celery worker processes for the demo, the benchmarks and the integration tests.

Starts ``celery -A <app> worker`` subprocesses (one pool per downstream queue), waits
until each answers a ping, samples their memory (main process + pool children), and
stops them — SIGTERM, then SIGKILL — whatever happens to the caller. The chaos
scenarios (:mod:`tidegate.harness.chaos`) also find the main and pool processes to kill
and restart a worker whose main process died.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tidegate.errors import ConfigurationError

__all__ = ["Fleet", "Pool", "PoolMemory"]


@dataclass
class PoolMemory:
    """One look at a pool's memory: the main process and each child, in MiB.

    ``started`` is each child's creation time (``time.time()`` seconds): a child forked
    late in a run shows whether the main process it was forked from has grown.
    """

    main_mb: float = 0.0
    children_mb: dict[int, float] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)

    @property
    def largest_mb(self) -> float:
        """The largest single process of the pool."""
        return max([self.main_mb, *self.children_mb.values()])


@dataclass(frozen=True, slots=True)
class Pool:
    """One worker: the queues it consumes and its process count.

    Args:
        name: node name prefix (``customs`` → ``customs@<host>``).
        queues: queues consumed.
        concurrency: prefork pool processes.
        prefetch: ``--prefetch-multiplier`` (1 = hold one message per process).
        extra: more ``celery worker`` arguments.
    """

    name: str
    queues: Sequence[str]
    concurrency: int = 2
    prefetch: int = 1
    extra: Sequence[str] = ()


@dataclass
class Fleet:
    """The worker processes of one run.

    Args:
        app: the ``-A`` argument (e.g. ``tidegate.harness.vessel_app``).
        pools: the workers to start.
        env: extra environment for the workers (URLs, gate defaults).
        log_dir: where each worker's stdout/stderr goes.
    """

    app: str
    pools: Sequence[Pool]
    env: Mapping[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, *, ready_timeout_s: float = 60.0) -> Fleet:
        """Start every pool; return once all answer ``celery inspect ping``."""
        for pool in self.pools:
            self._spawn(pool)
        self._wait_ready(ready_timeout_s)
        return self

    def _spawn(self, pool: Pool) -> None:
        env = {**os.environ, **self.env}
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            self.app,
            "worker",
            "-Q",
            ",".join(pool.queues),
            "-c",
            str(pool.concurrency),
            "--prefetch-multiplier",
            str(pool.prefetch),
            "-n",
            f"{pool.name}@%h",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "WARNING",
            *pool.extra,
        ]
        out: IO[bytes] | int = subprocess.DEVNULL
        if self.log_dir is not None:
            handle = (self.log_dir / f"worker-{pool.name}.log").open("ab")
            self._logs.append(handle)
            out = handle
        self.procs[pool.name] = subprocess.Popen(
            args, env=env, stdout=out, stderr=out, start_new_session=True
        )

    def main_pids(self) -> dict[str, int]:
        """The main process of each pool that is still running, by pool name."""
        return {name: proc.pid for name, proc in self.procs.items() if proc.poll() is None}

    def child_pids(self, name: str) -> list[int]:
        """The pool processes (prefork children) of worker ``name``."""
        import psutil

        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return []
        try:
            return [child.pid for child in psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def alive(self, name: str) -> bool:
        """Whether worker ``name``'s main process is running."""
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def restart(self, name: str, *, ready_timeout_s: float | None = None) -> None:
        """Start worker ``name`` again after its main process died (e.g. SIGKILL).

        Whatever is left of the old process group is killed first (Celery's pool
        children die with their parent, through ``PR_SET_PDEATHSIG``; this catches
        anything else). With ``ready_timeout_s``, wait until the new worker answers a
        ping; without, return at once — it joins the fleet when it is up.
        """
        pool = next(p for p in self.pools if p.name == name)
        old = self.procs.get(name)
        if old is not None:
            if old.poll() is None:
                raise ConfigurationError(f"worker {name} is still running (pid {old.pid})")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(old.pid, signal.SIGKILL)
        self._spawn(pool)
        if ready_timeout_s is not None:
            self._wait_ready(ready_timeout_s, names={name})

    def _wait_ready(self, timeout_s: float, *, names: set[str] | None = None) -> None:
        from celery import Celery

        # The workers' broker: a separate one (RabbitMQ) when named, else the Redis store.
        broker = (
            self.env.get("TIDEGATE_BROKER_URL")
            or self.env.get("TIDEGATE_REDIS_URL")
            or os.environ["TIDEGATE_REDIS_URL"]
        )
        probe = Celery(broker=broker, set_as_current=False)
        wanted = names if names is not None else {pool.name for pool in self.pools}
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                for name, proc in self.procs.items():
                    if name in wanted and proc.poll() is not None:
                        raise ConfigurationError(
                            f"worker {name} exited with code {proc.returncode} at start-up"
                        )
                replies = probe.control.ping(timeout=1.0) or []
                seen = {next(iter(reply)).split("@")[0] for reply in replies}
                if wanted <= seen:
                    return
            raise ConfigurationError(f"workers {sorted(wanted)} not ready after {timeout_s:g}s")
        finally:
            probe.close()

    def pids(self) -> list[int]:
        """Every worker process: main processes and their pool children."""
        import psutil

        pids = []
        for proc in self.procs.values():
            try:
                parent = psutil.Process(proc.pid)
                pids.append(parent.pid)
                pids.extend(child.pid for child in parent.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return pids

    def rss_mb(self) -> dict[str, float]:
        """Resident memory per pool (main + children), in MiB."""
        return {
            name: usage.main_mb + sum(usage.children_mb.values())
            for name, usage in self.rss_by_process().items()
        }

    def rss_by_process(self) -> dict[str, PoolMemory]:
        """Resident memory of each pool's main process and of each of its children.

        The main process is what must stay flat: every child a recycled pool forks
        inherits its heap.
        """
        import psutil

        usage: dict[str, PoolMemory] = {}
        for name, proc in self.procs.items():
            memory = PoolMemory()
            try:
                parent = psutil.Process(proc.pid)
                memory.main_mb = parent.memory_info().rss / 2**20
                for child in parent.children(recursive=True):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        memory.children_mb[child.pid] = child.memory_info().rss / 2**20
                        memory.started[child.pid] = child.create_time()
            except psutil.NoSuchProcess:
                pass
            usage[name] = memory
        return usage

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL the whole process group."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # A main process that died on its own (or was killed) may leave children.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for handle in self._logs:
            handle.close()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
