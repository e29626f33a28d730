"""A private RabbitMQ node on loopback, for chaos runs, cluster tests and benchmarks.

A chaos run restarts its broker; a cluster test stops one node of three. Neither may
touch the machine's shared RabbitMQ (other runs use it), so each starts its own nodes
from the installed ``rabbitmq-server`` (the Debian package, 3.10+): its own node name,
ports, data and log directories and Erlang cookie, all under one temporary directory
removed on :meth:`RabbitNode.cleanup`.

Ports are chosen free below 32768, away from the ephemeral range and from the CLI
tools' own distribution ports (35672–35682): a node bound there fails its boot with
``eaddrinuse`` the moment a ``rabbitmqctl`` runs. The AMQP and management listeners
bind 127.0.0.1 only (an IPv6-less container refuses ``::``).

Nodes started with the same ``cookie`` can form a cluster (:meth:`RabbitNode.join`).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tidegate.errors import BackendUnavailable, ConfigurationError

__all__ = ["RABBITMQ_BIN", "RabbitNode", "rabbitmq_installed"]

#: Where the Debian package puts the real scripts (``/usr/sbin/*`` su to ``rabbitmq``).
RABBITMQ_BIN = Path(os.environ.get("TIDEGATE_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
_PORT_RANGE = (20000, 32000)
_CLI_PORTS = range(35672, 35683)


def rabbitmq_installed() -> bool:
    """Whether a private node can be started here (the server and its CLI exist)."""
    return (RABBITMQ_BIN / "rabbitmq-server").exists() and (RABBITMQ_BIN / "rabbitmqctl").exists()


def _new_name() -> str:
    return f"tg{uuid.uuid4().hex[:8]}"


def _new_cookie() -> str:
    return uuid.uuid4().hex.upper()


def _free_port(taken: set[int]) -> int:
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(*_PORT_RANGE)
        if port in taken or port in _CLI_PORTS:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise BackendUnavailable("no free port for a private RabbitMQ node")


@dataclass
class RabbitNode:
    """One private RabbitMQ node (see the module docstring).

    Args:
        base: the directory for its data, logs, config and cookie (a new temporary
            one if ``None``; removed by :meth:`cleanup` only if it was made here).
        name: the node's short name (``<name>@localhost``).
        cookie: the Erlang cookie; nodes that are to cluster share it.
    """

    base: Path | None = None
    name: str = field(default_factory=_new_name)
    cookie: str = field(default_factory=_new_cookie)
    amqp_port: int = 0
    management_port: int = 0
    dist_port: int = 0
    _proc: subprocess.Popen[bytes] | None = None
    _owns_base: bool = False

    def __post_init__(self) -> None:
        if not rabbitmq_installed():
            raise ConfigurationError(f"rabbitmq-server is not installed under {RABBITMQ_BIN}")
        if self.base is None:
            self.base = Path(tempfile.mkdtemp(prefix="tidegate-rabbit-"))
            self._owns_base = True
        taken: set[int] = set()
        self.amqp_port = self.amqp_port or _free_port(taken)
        self.management_port = self.management_port or _free_port(taken)
        self.dist_port = self.dist_port or _free_port(taken)
        self._dir.mkdir(parents=True, exist_ok=True)
        home = self._dir / "home"
        home.mkdir(exist_ok=True)
        cookie = home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(self.cookie, encoding="ascii")
            cookie.chmod(0o400)
        (self._dir / "rabbitmq.conf").write_text(
            f"management.tcp.port = {self.management_port}\n"
            "management.tcp.ip = 127.0.0.1\n"
            "loopback_users = none\n"
            # Depth figures from the management API refresh this often (ms).
            "collect_statistics_interval = 1000\n",
            encoding="ascii",
        )
        (self._dir / "enabled_plugins").write_text("[rabbitmq_management].\n", encoding="ascii")

    @property
    def _dir(self) -> Path:
        assert self.base is not None
        return self.base / self.name

    @property
    def node(self) -> str:
        """The Erlang node name, ``<name>@localhost``."""
        return f"{self.name}@localhost"

    def url(self, vhost: str = "/") -> str:
        """The AMQP URL of ``vhost`` on this node (guest, loopback)."""
        from urllib.parse import quote

        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/{quote(vhost, safe='')}"

    @property
    def management_url(self) -> str:
        return f"http://guest:guest@127.0.0.1:{self.management_port}"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self._dir / "home"),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self._dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self._dir / "log"),
            "RABBITMQ_CONFIG_FILE": str(self._dir / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self._dir / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self._dir / "pid"),
        }

    def start(self, *, timeout_s: float = 180.0) -> RabbitNode:
        """Boot the node (data kept from a previous start); return once it serves AMQP
        and the management API. A boot takes 3–10 s on an idle machine, minutes on a
        saturated one."""
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def launch(self) -> None:
        """Start booting the node and return at once (:meth:`wait_ready` waits)."""
        if self.running():
            return
        out = (self._dir / "server.out").open("ab")
        self._proc = subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=self._env(),
            cwd=self._dir,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        out.close()

    def wait_ready(self, timeout_s: float) -> None:
        """Poll until the node's AMQP port and management API answer."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise BackendUnavailable(
                    f"RabbitMQ node {self.node} exited at boot (code {self._proc.returncode}); "
                    f"see {self._dir / 'server.out'}"
                )
            if self._serving():
                return
            time.sleep(0.25)
        raise BackendUnavailable(f"RabbitMQ node {self.node} not ready after {timeout_s:g}s")

    def _serving(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.amqp_port), timeout=0.5):
                pass
            response = httpx.get(
                f"http://127.0.0.1:{self.management_port}/api/overview",
                auth=("guest", "guest"),
                timeout=1.0,
            )
        except (OSError, httpx.HTTPError):
            return False
        return response.status_code == 200

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ctl(self, *args: str, timeout_s: float = 180.0) -> str:
        """Run ``rabbitmqctl -n <node> <args>``; return its output."""
        result = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.node, *args],
            env=self._env(),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
        if result.returncode != 0:
            raise BackendUnavailable(
                f"rabbitmqctl {' '.join(args)} on {self.node} failed: "
                f"{result.stderr.decode(errors='replace').strip()[-300:]}"
            )
        return result.stdout.decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL the node's whole process group (the Erlang VM, epmd excepted): a
        crash, not a shutdown — what is not on disk is gone."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        # The VM may run under the script's process; anything with our pid file goes too.
        pid_file = self._dir / "pid"
        if pid_file.exists():
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
            pid_file.unlink(missing_ok=True)
        self._wait_port_closed()

    def _wait_port_closed(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.amqp_port), timeout=0.2):
                    pass
            except OSError:
                return
            time.sleep(0.1)

    def stop(self) -> None:
        """Shut the node down cleanly (``rabbitmqctl stop``), SIGKILL if that fails."""
        if not self.running():
            return
        try:
            self.ctl("stop", timeout_s=30.0)
            assert self._proc is not None
            self._proc.wait(timeout=30.0)
        except (BackendUnavailable, subprocess.TimeoutExpired):
            self.kill()

    def join(self, seed: RabbitNode) -> None:
        """Make this (running) node a member of ``seed``'s cluster (same cookie needed)."""
        if seed.cookie != self.cookie:
            raise ConfigurationError("nodes of one cluster need the same Erlang cookie")
        self.ctl("stop_app")
        self.ctl("join_cluster", seed.node)
        self.ctl("start_app")
        self.wait_ready(180.0)

    def cleanup(self) -> None:
        """Stop the node and remove its directory (if this object made it)."""
        self.stop()
        if self._owns_base and self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> RabbitNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
