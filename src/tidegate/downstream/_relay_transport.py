"""A worker's side of the relay: an httpx transport that hands each request to a lane.

:class:`~tidegate.downstream.DownstreamClient` keeps doing what it does — the
idempotency key, the classification of 429/503, the gate's pause, the adaptive
observer — and only the last hop changes: the request goes onto the downstream's relay
list in Redis, and a lane that owns one of its connections sends it, pipelined
(:mod:`tidegate.downstream.relay`). So the lifecycle, the ledger and the verdict see
the same answers and the same transport errors as with a direct connection:

- the relay did not take the request within the connect timeout and it was taken back
  off the list, or a lane could not write it: ``httpx.ConnectTimeout`` /
  ``httpx.ConnectError`` — it never left, and may be resent at once;
- a lane wrote it and then lost the connection, or no answer came within the read
  timeout after the relay took it: ``httpx.ReadError`` / ``httpx.ReadTimeout`` — it
  may have reached the downstream, and the lifecycle looks it up before sending again.
"""

from __future__ import annotations

import time
import uuid

import httpx
import redis

from tidegate._redis import blocking_timeout_s
from tidegate.downstream._relay_wire import RelayedAnswer, RelayedRequest, RelayFailure
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = ["RelayTransport"]

#: How long an answer nobody read is kept (its worker died or gave up), seconds.
ANSWER_TTL_S = 300
_DEFAULT_TIMEOUT_S = 10.0


def _timeouts(request: httpx.Request) -> tuple[float, float]:
    """(seconds for a lane to take the request, seconds for its answer after that)."""
    value = request.extensions.get("timeout") or {}
    connect = value.get("connect") or value.get("pool") or _DEFAULT_TIMEOUT_S
    read = value.get("read") or _DEFAULT_TIMEOUT_S
    return float(connect), float(read)


class RelayTransport(httpx.BaseTransport):
    """Hand requests for downstream ``name`` to its relay through ``client``.

    Args:
        client: tidegate's Redis (the relay's lanes read the same keyspace).
        name: the downstream.
        prefix: the fleet's key prefix.
    """

    def __init__(self, client: redis.Redis, name: str, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._client = client
        self._name = name
        self._keys = Keyspace(prefix)
        self._requests = self._keys.relay_requests(name)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        take_s, read_s = _timeouts(request)
        relayed = RelayedRequest(
            uuid.uuid4().hex,
            request.method,
            request.url.raw_path.decode("ascii"),
            [
                (k.decode("latin-1"), v.decode("latin-1"))
                for k, v in request.headers.raw
                if k.lower() not in (b"host", b"connection")
            ],
            request.read(),
        )
        payload = relayed.encode()
        answer_key = self._keys.relay_answer(self._name, relayed.id)
        try:
            self._client.rpush(self._requests, payload)
        except redis.RedisError as exc:
            raise httpx.ConnectError(f"relay unreachable: {exc}", request=request) from exc
        try:
            raw = self._wait(answer_key, take_s)
            if raw is None:
                if self._client.lrem(self._requests, 1, payload):
                    raise httpx.ConnectTimeout(
                        f"no relay lane took the request within {take_s:g} s", request=request
                    )
                raw = self._wait(answer_key, read_s)
        except redis.RedisError as exc:
            raise httpx.ReadError(f"relay answer unreadable: {exc}", request=request) from exc
        if raw is None:
            raise httpx.ReadTimeout(
                f"the relay took the request and did not answer within {read_s:g} s",
                request=request,
            )
        return _response(RelayedAnswer.decode(raw), request)

    def _wait(self, key: str, seconds: float) -> bytes | None:
        """The answer, or ``None`` after ``seconds``: a block is kept under the socket
        timeout (:func:`~tidegate._redis.blocking_timeout_s`), so a long wait is several."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            item = self._client.blpop([key], timeout=blocking_timeout_s(self._client, left))
            if item is not None:
                value = item[1]
                return value.encode() if isinstance(value, str) else bytes(value)


def _response(answer: RelayedAnswer, request: httpx.Request) -> httpx.Response:
    if answer.failure is RelayFailure.NOT_SENT:
        raise httpx.ConnectError(f"the relay could not send it: {answer.detail}", request=request)
    if answer.failure is RelayFailure.LOST:
        raise httpx.ReadError(
            f"the relay's connection failed after sending it: {answer.detail}", request=request
        )
    return httpx.Response(
        answer.status, headers=answer.headers or [], content=answer.body, request=request
    )
