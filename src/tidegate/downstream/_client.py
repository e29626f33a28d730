"""The downstream HTTP clients: JSON writes with an idempotency key, errors as decisions.

:class:`DownstreamClient` (``httpx.Client``) and :class:`AsyncDownstreamClient`
(``httpx.AsyncClient``) differ only in I/O. Everything else — building the request,
classifying the answer (:func:`~tidegate.downstream.classify_response`), the log events,
the error to raise — lives once in :class:`_ClientCore`.

One call, one decision, one log event::

    2xx + JSON object     return the parsed body
    429                   feedback.pause(retry_after_s, reason="http_429"), then
                          raise DownstreamThrottled          event downstream_throttled
    408/425/5xx, refused, raise DownstreamUnavailable        event downstream_unavailable
    timed out, 2xx with
    an unreadable body
    other 4xx (and 3xx)   raise DownstreamRejected           event downstream_rejected

httpx errors are translated in one place (:meth:`_ClientCore._transport_errors`) and
chained with ``raise ... from exc``. Bodies are never logged, in either direction.

Why one module of ~480 lines: the sync and asyncio clients are twins over
:class:`_ClientCore`; each differs from the other only in awaiting httpx, and keeping
them beside the core is what keeps them the same.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Protocol, Self
from urllib.parse import quote

import httpx

from tidegate.downstream._classify import (
    Outcome,
    RetryAfterPolicy,
    classify_response,
    unavailable,
)
from tidegate.downstream._report import CallObserver, observe_failure, observe_response
from tidegate.errors import ConfigurationError, DownstreamRejected, DownstreamThrottled
from tidegate.events import DownstreamAnswered429, emit
from tidegate.logging import get_logger, key_hash

__all__ = [
    "DEFAULT_TIMEOUT",
    "IDEMPOTENCY_HEADER",
    "PAUSE_REASON_HTTP_429",
    "AsyncDownstreamClient",
    "DownstreamClient",
    "PauseFeedback",
]

log = get_logger("tidegate.downstream")

#: Per-request timeouts: a slow downstream gets 10 s to answer, 3 s to accept a connection.
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)
#: The header that makes a retried write safe (draft-ietf-httpapi-idempotency-key-header).
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The ``reason`` passed to :meth:`PauseFeedback.pause` on a 429.
PAUSE_REASON_HTTP_429 = "http_429"
_MAX_KEY_LENGTH = 255
#: A downstream's error code is kept only when it looks like one, never a payload echo.
_ERROR_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class PauseFeedback(Protocol):
    """Where a 429 is reported so that the whole fleet pauses, not just this worker.

    The real implementation is the fleet-wide gate of the downstream. ``pause`` may
    return an awaitable; :class:`AsyncDownstreamClient` awaits it.
    """

    def pause(self, seconds: float, reason: str) -> object:
        """Stop admitting calls to the downstream for ``seconds``."""
        ...


def _check_key(idempotency_key: str) -> str:
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise ConfigurationError("every write needs a non-empty idempotency_key")
    if len(idempotency_key) > _MAX_KEY_LENGTH or not idempotency_key.isprintable():
        raise ConfigurationError(
            f"idempotency_key must be at most {_MAX_KEY_LENGTH} printable characters"
        )
    try:
        idempotency_key.encode("ascii")
    except UnicodeEncodeError:
        raise ConfigurationError("idempotency_key must be ASCII (it is an HTTP header)") from None
    return idempotency_key


def _error_code(response: httpx.Response) -> str | None:
    """The ``error`` (or ``code``) field of a JSON refusal, when it is a short token."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    for name in ("error", "code"):
        value = body.get(name)
        if isinstance(value, str) and _ERROR_CODE.fullmatch(value):
            return value
    return None


def _refuse_awaitable(result: object) -> None:
    """A sync client cannot await ``pause()``: fail loudly rather than skip the pause."""
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()  # no "coroutine was never awaited" warning on top of the error
        raise ConfigurationError(
            "feedback.pause() returned an awaitable: use AsyncDownstreamClient with an "
            "asyncio gate, or give DownstreamClient a synchronous one"
        )


class _ClientCore:
    """What the sync and async clients share: configuration, requests, decisions."""

    def __init__(
        self,
        name: str,
        *,
        feedback: PauseFeedback | None,
        retry_after_policy: RetryAfterPolicy | None,
        wall_clock: Callable[[], float],
        observer: CallObserver | None = None,
    ) -> None:
        if not name:
            raise ConfigurationError("a downstream client needs a name")
        self.name = name
        self.feedback = feedback
        self.observer = observer
        self.retry_after_policy = retry_after_policy or RetryAfterPolicy()
        self._wall_clock = wall_clock

    @staticmethod
    def _lookup_path(path: str, idempotency_key: str) -> str:
        return f"{path.rstrip('/')}/{quote(_check_key(idempotency_key), safe='')}"

    def _prepare(
        self, json_body: Mapping[str, Any], idempotency_key: str
    ) -> tuple[bytes, dict[str, str]]:
        key = _check_key(idempotency_key)
        content = json.dumps(json_body, separators=(",", ":"), allow_nan=False).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            IDEMPOTENCY_HEADER: key,
        }
        return content, headers

    @contextlib.contextmanager
    def _transport_errors(self, path: str, idempotency_key: str) -> Iterator[None]:
        """The one boundary where httpx errors become :class:`DownstreamUnavailable`."""
        try:
            yield
        except httpx.RequestError as exc:
            observe_failure(self.name, self.observer)
            error = type(exc).__name__
            log.warning(
                "downstream_unavailable",
                downstream=self.name,
                path=path,
                status=None,
                error=error,
                retry_after_s=None,
                key_hash=key_hash(idempotency_key),
            )
            raise unavailable(self.name, f"{error}: no answer", status=None) from exc

    def _classify(self, response: httpx.Response) -> Outcome:
        now = self._wall_clock()
        outcome = classify_response(
            self.name,
            response.status_code,
            response.headers,
            now=now,
            policy=self.retry_after_policy,
        )
        observe_response(self.name, self.observer, outcome, response, now=now)
        return outcome

    def _log_retry_after(self, outcome: Outcome, path: str) -> None:
        issue = outcome.retry_after_issue
        if issue is None:
            return
        clamped = issue == "clamped"
        log.warning(
            "downstream_retry_after_clamped" if clamped else "downstream_retry_after_invalid",
            downstream=self.name,
            path=path,
            status=outcome.status,
            issue=issue,
            retry_after_raw=outcome.retry_after_raw,
            retry_after_s=outcome.retry_after_s,
        )

    def _pause_failed(self, outcome: Outcome, exc: Exception) -> None:
        log.error(
            "downstream_pause_failed",
            downstream=self.name,
            retry_after_s=outcome.retry_after_s,
            error=type(exc).__name__,
        )

    def _conclude(
        self,
        outcome: Outcome,
        response: httpx.Response,
        path: str,
        idempotency_key: str,
        *,
        paused: bool,
        pause_error: Exception | None,
    ) -> dict[str, Any]:
        """Log the decision and return the body or raise; shared by both clients."""
        self._log_retry_after(outcome, path)
        fields = {
            "downstream": self.name,
            "path": path,
            "status": outcome.status,
            "key_hash": key_hash(idempotency_key),
        }
        if outcome.ok:
            return self._body(response, fields)
        error = outcome.error()
        assert error is not None
        if isinstance(error, DownstreamThrottled):
            emit(
                DownstreamAnswered429(
                    outcome.retry_after_s,
                    paused,
                    self.name,
                    path,
                    outcome.status,
                    key_hash(idempotency_key),
                )
            )
            raise error from pause_error
        if outcome.kind == "unavailable":
            log.warning(
                "downstream_unavailable",
                retry_after_s=outcome.retry_after_s,
                error="http_status",
                **fields,
            )
        else:
            code = _error_code(response)
            log.error("downstream_rejected", code=code, **fields)
            if code is not None and isinstance(error, DownstreamRejected):
                raise DownstreamRejected(
                    self.name, f"HTTP {outcome.status}", status=outcome.status, code=code
                )
        raise error

    def _body(self, response: httpx.Response, fields: dict[str, Any]) -> dict[str, Any]:
        if response.status_code == 204 or not response.content:
            return {}
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            return body
        # The downstream said yes and then something unreadable: it may or may not have
        # taken the write. Retrying under the same idempotency key is the safe answer.
        log.warning("downstream_unavailable", retry_after_s=None, error="unreadable_body", **fields)
        raise unavailable(
            self.name, "2xx with a body that is not a JSON object", status=response.status_code
        )

    def _pause_target(self, outcome: Outcome) -> tuple[PauseFeedback, float] | None:
        """The feedback to call and the pause to ask for, when the outcome is a 429."""
        if outcome.kind != "throttled" or self.feedback is None or outcome.retry_after_s is None:
            return None
        return self.feedback, outcome.retry_after_s


class DownstreamClient(_ClientCore):
    """A synchronous client for one downstream.

    Args:
        name: the downstream's name, as in the gate, the errors and the log events.
        base_url: e.g. ``"https://gateway.customs.example/api"``; ``send`` paths are
            relative to it.
        feedback: told about every 429 (``pause(retry_after_s, reason="http_429")``)
            before :class:`~tidegate.errors.DownstreamThrottled` is raised; ``None``
            to only raise.
        timeout: seconds, or an ``httpx.Timeout``.
        headers: sent with every request (e.g. an API key).
        retry_after_policy: how far ``Retry-After`` is believed.
        transport: an ``httpx.BaseTransport`` (``httpx.MockTransport`` in tests).
        wall_clock: ``time.time``, to read an HTTP-date ``Retry-After``.
        observer: told about every call's outcome, latency and rate-limit headers
            (the adaptive controller's fleet window); ``None`` to tell nobody.

    Example::

        with DownstreamClient("customs", sim.url, feedback=gate) as client:
            client.send("/declarations", {"mrn": "..."}, idempotency_key="VERMAS-123")
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        feedback: PauseFeedback | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        retry_after_policy: RetryAfterPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        wall_clock: Callable[[], float] = time.time,
        observer: CallObserver | None = None,
    ) -> None:
        super().__init__(
            name,
            feedback=feedback,
            retry_after_policy=retry_after_policy,
            wall_clock=wall_clock,
            observer=observer,
        )
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, headers=headers, transport=transport
        )

    def send(
        self, path: str, json_body: Mapping[str, Any], *, idempotency_key: str
    ) -> dict[str, Any]:
        """POST ``json_body`` to ``path`` with ``Idempotency-Key``; return the JSON answer.

        Raises:
            ConfigurationError: ``idempotency_key`` is empty (a ``ValueError``), or
                ``feedback.pause`` returned an awaitable (use the async client).
            DownstreamThrottled: 429, after ``feedback.pause``.
            DownstreamUnavailable: 408/425/5xx, no connection, timeout, unreadable 2xx.
            DownstreamRejected: any other status.
        """
        content, headers = self._prepare(json_body, idempotency_key)
        with self._transport_errors(path, idempotency_key):
            response = self._http.post(path, content=content, headers=headers)
        return self._answer(response, path, idempotency_key)

    def lookup(self, path: str, *, idempotency_key: str) -> dict[str, Any] | None:
        """Ask whether a write with ``idempotency_key`` was accepted: ``GET path/<key>``.

        Returns the downstream's record (a JSON object) or ``None`` on 404. This is how
        a unit whose previous attempt died between sending and recording (a SIGKILL, a
        timeout) learns whether it still has to send. Errors as for :meth:`send`.
        """
        url = self._lookup_path(path, idempotency_key)
        with self._transport_errors(path, idempotency_key):
            response = self._http.get(url, headers={"Accept": "application/json"})
        if response.status_code == 404:
            return None
        return self._answer(response, path, idempotency_key)

    def _answer(self, response: httpx.Response, path: str, idempotency_key: str) -> dict[str, Any]:
        outcome = self._classify(response)
        paused, pause_error = False, None
        target = self._pause_target(outcome)
        if target is not None:
            feedback, seconds = target
            try:
                result = feedback.pause(seconds, reason=PAUSE_REASON_HTTP_429)
            except Exception as exc:
                self._pause_failed(outcome, exc)
                pause_error = exc
            else:
                _refuse_awaitable(result)
                paused = True
        return self._conclude(
            outcome, response, path, idempotency_key, paused=paused, pause_error=pause_error
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncDownstreamClient(_ClientCore):
    """The asyncio twin of :class:`DownstreamClient`; same arguments, ``await send(...)``.

    ``transport`` is an ``httpx.AsyncBaseTransport``. When ``feedback.pause`` returns an
    awaitable, it is awaited before ``DownstreamThrottled`` is raised.
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        feedback: PauseFeedback | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        retry_after_policy: RetryAfterPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        wall_clock: Callable[[], float] = time.time,
        observer: CallObserver | None = None,
    ) -> None:
        super().__init__(
            name,
            feedback=feedback,
            retry_after_policy=retry_after_policy,
            wall_clock=wall_clock,
            observer=observer,
        )
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=timeout, headers=headers, transport=transport
        )

    async def send(
        self, path: str, json_body: Mapping[str, Any], *, idempotency_key: str
    ) -> dict[str, Any]:
        """POST ``json_body`` to ``path``; see :meth:`DownstreamClient.send`."""
        content, headers = self._prepare(json_body, idempotency_key)
        with self._transport_errors(path, idempotency_key):
            response = await self._http.post(path, content=content, headers=headers)
        return await self._answer(response, path, idempotency_key)

    async def lookup(self, path: str, *, idempotency_key: str) -> dict[str, Any] | None:
        """``GET path/<key>``; see :meth:`DownstreamClient.lookup`."""
        url = self._lookup_path(path, idempotency_key)
        with self._transport_errors(path, idempotency_key):
            response = await self._http.get(url, headers={"Accept": "application/json"})
        if response.status_code == 404:
            return None
        return await self._answer(response, path, idempotency_key)

    async def _answer(
        self, response: httpx.Response, path: str, idempotency_key: str
    ) -> dict[str, Any]:
        outcome = self._classify(response)
        paused, pause_error = False, None
        target = self._pause_target(outcome)
        if target is not None:
            feedback, seconds = target
            try:
                result = feedback.pause(seconds, reason=PAUSE_REASON_HTTP_429)
                if inspect.isawaitable(result):
                    await result
                paused = True
            except Exception as exc:
                self._pause_failed(outcome, exc)
                pause_error = exc
        return self._conclude(
            outcome, response, path, idempotency_key, paused=paused, pause_error=pause_error
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
