"""Real RQ worker processes for the demo: one pool per downstream queue.

Each worker is ``rq worker`` of a tidegate worker class (``JsonWorker`` unless told)
with its dead-letter handler, in its own process group; the first of each pool runs
RQ's scheduler (parked jobs are scheduled jobs). A short ``--maintenance-interval``
makes RQ look for jobs abandoned by a killed worker often; such a job comes back once
its heartbeat has expired (``--job-monitoring-interval`` + 60 s, RQ's floor).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tidegate.harness.celery_fleet import PoolMemory

__all__ = ["RqFleet", "RqPool"]

#: Seconds between two looks for abandoned jobs (RQ's default is 10 minutes).
MAINTENANCE_INTERVAL_S = 5
#: Seconds between a worker's heartbeats while a job runs (RQ's default: 30).
JOB_MONITORING_INTERVAL_S = 5


@dataclass(frozen=True, slots=True)
class RqPool:
    """``count`` workers on ``queue``, named ``<name>-<n>``."""

    name: str
    queue: str
    count: int


class RqFleet:
    """Starts, watches, kills and restarts the RQ workers of the demo.

    Args:
        url: RQ's Redis.
        pools: the pools.
        env: environment added to the workers'.
        log_dir: worker logs go here (``<worker>.log``); discarded when ``None``.
        worker_class: the RQ worker class (dotted path) every worker runs.
    """

    def __init__(
        self,
        url: str,
        pools: list[RqPool],
        *,
        env: Mapping[str, str],
        log_dir: Path | None,
        worker_class: str = "tidegate.integrations.rq.JsonWorker",
    ) -> None:
        self.url, self.pools, self.log_dir = url, pools, log_dir
        self.worker_class = worker_class
        self.env = {**os.environ, **env}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._starts: dict[str, int] = {}
        self._queues = {f"{p.name}-{n}": p.queue for p in pools for n in range(p.count)}

    def start(self) -> RqFleet:
        for name in self._queues:
            self._spawn(name)
        return self

    def _spawn(self, name: str) -> None:
        # A killed worker's registration outlives it (RQ's worker TTL): a new name.
        starts = self._starts[name] = self._starts.get(name, -1) + 1
        args = [
            sys.executable,
            *("-m", "rq.cli", "worker", "--url", self.url, "-q"),
            *("--name", f"{name}.{starts}.{os.getpid()}"),
            *("--worker-class", self.worker_class),
            *("--exception-handler", "tidegate.integrations.rq.dead_letter_handler"),
            *("--maintenance-interval", str(MAINTENANCE_INTERVAL_S)),
            *("--job-monitoring-interval", str(JOB_MONITORING_INTERVAL_S)),
        ]
        if name.endswith("-0"):
            args.append("--with-scheduler")
        log: IO[bytes] | int = subprocess.DEVNULL
        if self.log_dir is not None:
            log = (self.log_dir / f"rq-{name}.log").open("ab")
        try:
            self.procs[name] = subprocess.Popen(
                [*args, self._queues[name]],
                env=self.env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        finally:
            if not isinstance(log, int):
                log.close()

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def restart(self, name: str) -> None:
        """Start worker ``name`` again (its main process died)."""
        self.procs[name].wait()
        self._spawn(name)

    def main_pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items() if proc.poll() is None}

    def horse_pids(self, name: str) -> list[int]:
        """The work horses (forked job runners) of worker ``name``."""
        import psutil

        try:
            return [child.pid for child in psutil.Process(self.procs[name].pid).children()]
        except psutil.NoSuchProcess:
            return []

    def rss_by_process(self) -> dict[str, PoolMemory]:
        """Per pool, the largest worker main process and the largest work horse, MiB."""
        import psutil

        usage: dict[str, PoolMemory] = {}
        for name, proc in self.procs.items():
            memory = usage.setdefault(name.rsplit("-", 1)[0], PoolMemory())
            with contextlib.suppress(psutil.NoSuchProcess):
                main = psutil.Process(proc.pid)
                memory.main_mb = max(memory.main_mb, main.memory_info().rss / 2**20)
                for child in main.children(recursive=True):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        memory.children_mb[child.pid] = child.memory_info().rss / 2**20
        return usage

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL the whole process group."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
