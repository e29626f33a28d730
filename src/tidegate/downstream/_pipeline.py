"""One HTTP/1.1 connection whose requests are written ahead of their answers.

Why: a connection-limited downstream (a TOS) serves one request at a time on each
connection. A client that writes its next request only once the answer is in leaves the
connection idle for the whole HTTP exchange between two calls — the answer's way back,
the client's turn, the request's way in: 2.4-2.8 ms a call through httpx on the bench
machine, more than the 2.6 ms that 95 % busy allows at 50-ms calls. Written ahead, the
next request is in the downstream's buffer when it answers, and it starts serving it at
once (RFC 9112 §9.3.2; BENCHMARKS.md, "HTTP/1.1 pipelining"). A POST may be pipelined
here because every write tidegate makes carries an idempotency key: a request lost with
the connection is resent safely.

Each request gets its own h11 client state machine, which encodes it and parses its
answer; the bytes that follow one answer (the start of the next) are handed to the next
request's parser. One thread writes (:meth:`PipelinedConnection.write`), one reads
(:meth:`PipelinedConnection.read`), in the order written; CPython sockets allow one of
each at a time.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

__all__ = ["Answer", "Pending", "PipelinedConnection"]

_RECV_BYTES = 65536


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer, read in full.

    ``reusable`` is false when the downstream closes the connection after it
    (``Connection: close``, HTTP/1.0): requests written after this one were not read.
    """

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    reusable: bool


class Pending:
    """A request written and not yet answered: its own parser, waiting for the bytes."""

    __slots__ = ("_h11",)

    def __init__(self, machine: h11.Connection) -> None:
        self._h11 = machine


class PipelinedConnection:
    """A kept-alive connection to ``base_url``'s host, requests written ahead.

    Args:
        base_url: ``http://`` or ``https://`` URL: where to connect. A request's target
            is its whole path (what the worker's client built from its own base URL).
        connect_timeout_s: seconds to open the connection.
        read_timeout_s: seconds an answer may take to arrive in full, from the moment
            :meth:`read` starts waiting for it.
        ssl_context: for ``https``; the default context when ``None``.

    Raises:
        OSError: from :meth:`connect`, :meth:`write` and :meth:`read` when the
            connection cannot be opened, is closed, or times out.
        h11.RemoteProtocolError: from :meth:`read` on an answer that is not HTTP/1.1.
    """

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._tls = parts.scheme == "https"
        self._address = (parts.hostname, parts.port or (443 if self._tls else 80))
        self._host = parts.netloc.rpartition("@")[2]
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._ssl_context = ssl_context
        self._sock: socket.socket | None = None
        self._leftover = b""

    def connect(self) -> None:
        """Open the connection (once)."""
        sock = socket.create_connection(self._address, timeout=self._connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls:
            context = self._ssl_context or ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=self._address[0])
        sock.settimeout(self._read_timeout_s)
        self._sock = sock

    def write(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> Pending:
        """Send one request without waiting for the answers before it."""
        machine = h11.Connection(h11.CLIENT)
        names = {name.lower() for name, _ in headers}
        extra = [] if "host" in names else [("Host", self._host)]
        if "content-length" not in names:
            extra.append(("Content-Length", str(len(body))))
        request = h11.Request(method=method, target=target, headers=[*extra, *headers])
        data = machine.send(request) or b""
        if body:
            data += machine.send(h11.Data(data=body)) or b""
        data += machine.send(h11.EndOfMessage()) or b""
        self._socket().sendall(data)
        return Pending(machine)

    def read(self, pending: Pending) -> Answer:
        """Read the answer to ``pending``: call in the order the requests were written."""
        machine = pending._h11
        if self._leftover:  # (h11 reads an empty chunk as the end of the stream)
            machine.receive_data(self._leftover)
            self._leftover = b""
        status, headers, body = 0, [], bytearray()
        while True:
            event = machine.next_event()
            if event is h11.NEED_DATA:
                machine.receive_data(self._socket().recv(_RECV_BYTES))
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers]
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the downstream closed the connection before answering")
        reusable = machine.our_state is h11.DONE and machine.their_state is h11.DONE
        if reusable:
            self._leftover = machine.trailing_data[0]
        return Answer(status, headers, bytes(body), reusable)

    def close(self) -> None:
        """Close the connection; a blocked :meth:`read` returns with an error."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        with contextlib.suppress(OSError):  # already closed by the peer
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionError("the connection is not open")
        return self._sock
