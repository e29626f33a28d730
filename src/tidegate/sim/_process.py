"""A simulated downstream in its own process, read and stopped from the parent.

A real TOS is another system: it does not share a Python process, let alone a GIL,
with the workers' intake and the demo's senders. Served from a thread of the demo's
own process, every TOS answer waited its turn behind the intake's and the senders'
Python, and that wait counted as a connection left idle between calls
(``bench/tos_turn.py``: the HTTP exchange beyond the service time was the largest
part of a lease's hold). :class:`SimProcess` starts ``python -m tidegate.sim`` (see
:mod:`tidegate.sim._cli`), reads the URL it announces, and offers the reads a run
needs — :meth:`stats` and :meth:`accepted_keys` over ``GET /stats`` and
``GET /accepted`` — with the same names as an in-process sim.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import signal
import subprocess
import sys
import tempfile
from types import TracebackType
from typing import IO, Any, Self

import httpx

from tidegate.errors import ConfigurationError, TidegateError

__all__ = ["SimProcess", "SimProcessError"]

#: How long a sim may take to bind its port and announce it.
START_TIMEOUT_S = 30.0
#: How long a sim may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0


class SimProcessError(TidegateError):
    """The sim's process did not start, or stopped answering."""


class SimProcess:
    """``python -m tidegate.sim KIND ARGS…`` as a context manager.

    Example::

        with SimProcess("tos", "--max-connections", "4", "--service-s", "0.05") as tos:
            httpx.post(tos.endpoint, json={...}, headers={"Idempotency-Key": "k1"})
            tos.stats()["busy_share"]

    Raises:
        ConfigurationError: the sim refused its arguments (its usage error is the message).
        SimProcessError: it exited or said nothing within ``start_timeout_s``.
    """

    def __init__(self, kind: str, *args: str, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.kind = kind
        # The sim holds our end of its stdin: if this process dies without stop() (a
        # SIGKILL), the pipe closes and the sim exits instead of serving on its port.
        self.args = (kind, "--until-stdin-closes", *args)
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._announced: dict[str, Any] = {}
        self._client: httpx.Client | None = None
        self._stderr: IO[str] | None = None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
        return str(self._announce()["url"])

    @property
    def endpoint(self) -> str:
        """The write path's URL."""
        return str(self._announce()["endpoint"])

    @property
    def pid(self) -> int:
        return int(self._announce()["pid"])

    def start(self) -> Self:
        # The same interpreter finds the same tidegate, as the worker fleets do. Its log
        # lines go to a file, not a pipe: a pipe nobody reads fills up and stops the sim.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by stop()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.sim", *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._proc = proc
        try:
            self._announced = json.loads(self._first_line(proc))
        except BaseException:
            self.stop()
            raise
        self._client = httpx.Client(base_url=self.url, timeout=30.0)
        return self

    def _first_line(self, proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            ready = selector.select(self.start_timeout_s)
        line = proc.stdout.readline() if ready else ""
        if line:
            return line
        if ready:  # end of stdout: the child is exiting
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(STOP_TIMEOUT_S)
        if proc.poll() is None:
            raise SimProcessError(
                f"the {self.kind} sim announced nothing within {self.start_timeout_s:g}s"
            )
        stderr = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            stderr = self._stderr.read()
        if proc.returncode == 2:  # click's usage error
            raise ConfigurationError(f"{self.kind} sim: {stderr.strip()}")
        raise SimProcessError(f"the {self.kind} sim exited with {proc.returncode}: {stderr[-500:]}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``STOP_TIMEOUT_S``."""
        if self._client is not None:
            self._client.close()
            self._client = None
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.communicate()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stats(self, *, timeline: bool = True) -> dict[str, Any]:
        """The sim's ``GET /stats`` (see :meth:`tidegate.sim.SimServer.stats`)."""
        answer: dict[str, Any] = self._get("/stats" if timeline else "/stats?timeline=0")
        return answer

    def accepted_keys(self) -> list[str]:
        """Every accepted ``Idempotency-Key`` in accept order (``GET /accepted``)."""
        return [str(key) for key in self._get("/accepted")["keys"]]

    def _get(self, path: str) -> Any:
        if self._client is None:
            raise SimProcessError(f"the {self.kind} sim is not running")
        try:
            response = self._client.get(path)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise SimProcessError(f"the {self.kind} sim did not answer {path}: {exc}") from exc
        return response.json()

    def _announce(self) -> dict[str, Any]:
        if not self._announced:
            raise SimProcessError(f"the {self.kind} sim has not started")
        return self._announced
