"""``tidegate demo --console``: the operator console on the running vessel demo.

A newcomer runs the demo and opens one URL to watch the burst move through the gates
and queues, and to pause the customs gateway or replay a dead letter while it runs.
:class:`DemoConsole` plugs into :func:`~tidegate.harness.scenarios.vessel.run_vessel_demo` as
a :class:`~tidegate.harness.scenarios.vessel.Disturbance` that disturbs nothing: once the
fleet is up (the run's key prefix is known only then) it starts

- a :class:`~tidegate.ops.monitor.Monitor` (the demo runs none, and the console's
  queue figures are the monitor's board), without replay: the demo's own intake owns
  its documents;
- the console, on loopback only, for one user ``demo`` with the operator role and a
  password generated for this run — printed once by the CLI, never logged, and
  useless after the run (the console and its Redis end with it).

The listening socket is bound when the object is made, so the URL can be printed
before the fleet starts; the console answers from the moment the run is submitted.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Self

import redis

from tidegate.errors import ConfigurationError

__all__ = ["DEMO_USER", "DemoConsole"]

#: The one user of a demo's console (an operator).
DEMO_USER = "demo"
#: Queues of the vessel demo and the gate each one's tasks go through.
_QUEUES = {"edi.customs": "customs", "edi.tos": "tos"}


class DemoConsole:
    """The console (and a monitor) on one vessel-demo run, for as long as it runs.

    Args:
        port: loopback port to listen on (0: any free port).
        refresh_s: the page's refresh period.
        history_every_s: the charts' sampling period.
        monitor_interval_s: the monitor's sampling period (queue figures).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        refresh_s: float = 1.0,
        history_every_s: float = 2.0,
        monitor_interval_s: float = 1.0,
    ) -> None:
        self.password = secrets.token_urlsafe(18)
        self.refresh_s = refresh_s
        self.history_every_s = history_every_s
        self.monitor_interval_s = monitor_interval_s
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))
        self._socket.listen(128)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/"
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._closers: list[Callable[[], None]] = []

    # -- the Disturbance protocol: observe, change nothing ----------------------------

    def worker_env(self) -> dict[str, str]:
        return {}

    def documents(self, burst: list[Any]) -> list[Any]:
        return burst

    def started(self, run: Any) -> None:
        """The fleet is up: start the monitor and the console on the run's prefix, with
        the gate defaults the workers were given (Redis holds only overrides)."""
        from tidegate.harness.burst_run import worker_env

        self.start(
            run.url,
            run.prefix,
            gate_env=worker_env(run.url, run.prefix, run.customs, run.tos, run.config),
        )

    def tick(self, run: Any, t: float) -> None:
        pass

    def busy(self, t: float) -> bool:
        return False

    def collect(self, run: Any) -> dict[str, Any]:
        return {}

    # -- the console -------------------------------------------------------------------

    def start(self, url: str, prefix: str, *, gate_env: Mapping[str, str] | None = None) -> None:
        """Serve the console for the fleet at ``url`` under ``prefix`` (in a thread)."""
        import uvicorn

        from tidegate._redis import client_from_url
        from tidegate.console import ConsoleConfig, Users, create_app, hash_secret
        from tidegate.console.access import Role
        from tidegate.console.publish import celery_publisher
        from tidegate.console.quarantine_replay import celery_quarantine_replayer
        from tidegate.integrations.celery.depth import RedisDepthProbe
        from tidegate.ops.monitor import Monitor

        client: redis.Redis = client_from_url(url)
        self._closers.append(client.close)
        monitor = Monitor(
            client,
            RedisDepthProbe.from_url(url),
            dict(_QUEUES),
            prefix=prefix,
            interval_s=self.monitor_interval_s,
        ).start()
        self._closers.append(monitor.stop)
        publish, close_publish = celery_publisher(url)
        self._closers.append(close_publish)
        release, close_release = celery_quarantine_replayer(client, url, prefix=prefix)
        self._closers.append(close_release)
        users = Users([(DEMO_USER, Role.OPERATOR, hash_secret(self.password))])
        app = create_app(
            client,
            ConsoleConfig(
                users=users,
                prefix=prefix,
                gates=tuple(_QUEUES.values()),
                publish=publish,
                replay_quarantine=release,
                refresh_s=self.refresh_s,
                history_every_s=self.history_every_s,
                gate_env=gate_env,
            ),
        )
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_config=None, access_log=False, lifespan="on")
        )
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name="tidegate-demo-console",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigurationError("the demo's console did not start")
            time.sleep(0.02)

    def close(self) -> None:
        """Stop the console and the monitor; close what they opened."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)
        for close in reversed(self._closers):
            close()
        self._closers.clear()
        self._socket.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
