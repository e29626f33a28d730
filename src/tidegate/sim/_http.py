"""The HTTP layer of the sims: a threading server that can drop its connections.

The stdlib ``ThreadingHTTPServer`` (one thread per connection, HTTP/1.1 keep-alive)
with four changes: a backlog a fleet does not overflow, quiet logging, a record of open
connections so that a ``refuse`` outage can reset them — an idle keep-alive connection
would otherwise keep being served after the listening socket is closed — and a record of
handler threads, so that stopping a sim waits for the answers still being written: a
handler that outlives its sim would log into whatever runs next.
What to answer is the sim's business (:class:`~tidegate.sim.SimServer`); this module
only reads requests and writes replies.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from tidegate.logging import get_logger

if TYPE_CHECKING:
    from tidegate.sim._base import SimServer

__all__ = [
    "CONTROL_PATHS",
    "MAX_BODY_BYTES",
    "Reply",
    "SimHTTPServer",
    "SimRequestHandler",
    "json_reply",
]

log = get_logger("tidegate.sim")

#: Paths served by every sim besides its write path.
CONTROL_PATHS: frozenset[str] = frozenset({"/stats", "/accepted", "/reset", "/outage", "/fault"})
#: Bodies above this are refused with 413 without being read.
MAX_BODY_BYTES = 1 << 20


@dataclass(slots=True)
class Reply:
    """One answer: status, body bytes, content type and extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_reply(status: int, value: Any, headers: dict[str, str] | None = None) -> Reply:
    """An ``application/json`` answer."""
    body = json.dumps(value, separators=(",", ":")).encode()
    return Reply(status, body, headers=headers or {})


class SimHTTPServer(ThreadingHTTPServer):
    """The listening socket; remembers open connections so an outage can reset them."""

    daemon_threads = True
    # A sleeping handler (a long service time) must not hold up stop().
    block_on_close = False
    # The default backlog of 5 drops connections when a fleet opens many at once.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], sim: SimServer) -> None:
        self.sim = sim
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._handlers: set[threading.Thread] = set()
        super().__init__(address, SimRequestHandler)

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.add(request)
        handler = threading.Thread(
            target=self._handle_and_forget,
            args=(request, client_address),
            name=f"tidegate-sim-{self.sim.kind}-handler",
            daemon=True,
        )
        handler.tidegate_sim = self.sim  # type: ignore[attr-defined]  # whose handler it is
        with self._connections_lock:
            self._handlers.add(handler)
        handler.start()

    def _handle_and_forget(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._handlers.discard(threading.current_thread())

    def join_handlers(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for every handler thread; return how many still run."""
        deadline = time.monotonic() + timeout
        with self._connections_lock:
            handlers = list(self._handlers)
        for handler in handlers:
            handler.join(max(0.0, deadline - time.monotonic()))
        return sum(handler.is_alive() for handler in handlers)

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Shut down every open connection; their handler threads then see EOF."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exception()
        if isinstance(error, (ConnectionError, TimeoutError)):
            # A client that hangs up mid-answer is normal under load: no traceback.
            log.debug("sim_connection_error", kind=self.sim.kind, error=type(error).__name__)
        else:
            log.exception("sim_internal_error", kind=self.sim.kind)


class SimRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tidegate-sim"
    sys_version = ""
    # Headers and body are two writes; without this, Nagle + delayed ACK add 40 ms.
    disable_nagle_algorithm = True
    # An idle keep-alive connection is closed after this many seconds.
    timeout = 60.0
    server: SimHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Stay silent: a sim answers thousands of calls and the counters tell the story."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/stats":
            timeline = "timeline=0" not in url.query.split("&")
            self._send(json_reply(200, self.server.sim.stats(timeline=timeline)))
        elif url.path == "/accepted":
            self._send(json_reply(200, {"keys": self.server.sim.accepted_keys()}))
        elif url.path.startswith(self.server.sim.path + "/"):
            key = unquote(url.path[len(self.server.sim.path) + 1 :])
            self._send(self.server.sim._handle_lookup(key))
        else:
            self._send(json_reply(404, {"error": "not_found"}))

    def do_POST(self) -> None:
        body = self._read_body()
        if body is None:
            return
        sim = self.server.sim
        path = urlsplit(self.path).path
        if path == sim.path:
            key = self.headers.get("Idempotency-Key")
            reply = sim._handle_write(
                self.headers.get_content_type(), None if key is None else str(key), body
            )
            self._send(reply)
        elif path in CONTROL_PATHS:
            reply, then = sim._handle_control("POST", path, body)
            self._send(reply)
            if then is not None:
                then()
        else:
            self._send(sim._handle_stray())

    def do_DELETE(self) -> None:
        body = self._read_body()
        if body is None:
            return
        reply, _ = self.server.sim._handle_control("DELETE", urlsplit(self.path).path, body)
        self._send(reply)

    def _read_body(self) -> bytes | None:
        if "chunked" in str(self.headers.get("Transfer-Encoding", "")).lower():
            self._send(json_reply(411, {"error": "length_required"}), close=True)
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._send(json_reply(400, {"error": "bad_content_length"}), close=True)
            return None
        if length > MAX_BODY_BYTES:
            self._send(json_reply(413, {"error": "body_too_large"}), close=True)
            return None
        return self.rfile.read(length) if length else b""

    def _send(self, reply: Reply, *, close: bool = False) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(reply.body)
