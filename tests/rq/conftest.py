"""RQ worker processes for the RQ integration tests.

Workers are real ``rq worker`` processes (``python -m rq.cli``) of tidegate's
``JsonWorker`` class, importing ``rq_jobs`` from this directory; queue names carry
the test's prefix, and the RQ keys of those queues and their jobs are deleted after
each test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

HERE = Path(__file__).parent


class Workers:
    """Starts ``rq worker`` processes and waits for them."""

    def __init__(self, redis_url: str, env: dict[str, str], log_dir: Path) -> None:
        self.redis_url = redis_url
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        queues: list[str],
        *,
        count: int = 1,
        burst: bool = True,
        handler: bool = True,
        scheduler: bool = False,
        extra_env: dict[str, str] | None = None,
        worker_args: tuple[str, ...] = ("--worker-class", "tidegate.integrations.rq.JsonWorker"),
    ) -> list[subprocess.Popen[bytes]]:
        pythonpath = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, **self.env, **(extra_env or {}), "PYTHONPATH": pythonpath}
        args = [
            sys.executable,
            "-m",
            "rq.cli",
            "worker",
            "--url",
            self.redis_url,
            "-q",
            *worker_args,
        ]
        if burst:
            args.append("--burst")
        if scheduler:
            args.append("--with-scheduler")
        if handler:
            args += ["--exception-handler", "tidegate.integrations.rq.dead_letter_handler"]
        started = []
        for _ in range(count):
            log = (self.log_dir / f"rq-worker-{len(self.procs)}.log").open("ab")
            proc = subprocess.Popen(
                [*args, *queues], env=env, stdout=log, stderr=log, start_new_session=True
            )
            log.close()
            self.procs.append(proc)
            started.append(proc)
        return started

    def wait(self, procs: list[subprocess.Popen[bytes]], timeout_s: float = 60.0) -> None:
        """Wait for burst workers to finish; fail with their logs if one did not exit 0."""
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            assert code == 0, self.logs()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.log_dir.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def rq_queue(prefix: str) -> str:
    """This test's RQ queue name."""
    return f"{prefix}-customs"


@pytest.fixture
def workers(
    redis_url: str, redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> Iterator[Callable[..., Workers]]:
    """A factory of RQ worker processes with tidegate's environment; stopped afterwards."""
    made: list[Workers] = []

    def make(env: dict[str, str]) -> Workers:
        base = {"TIDEGATE_REDIS_URL": redis_url, "TIDEGATE_PREFIX": prefix, **env}
        w = Workers(redis_url, base, tmp_path)
        made.append(w)
        return w

    try:
        yield make
    finally:
        for w in made:
            w.stop()
        for key in list(redis_client.scan_iter(match="rq:job:*", count=1000)):
            if (redis_client.hget(key, "origin") or b"").decode().startswith(prefix):
                redis_client.delete(key)
        keys = list(redis_client.scan_iter(match=f"rq:*{prefix}*", count=1000))
        if keys:
            redis_client.delete(*keys)
