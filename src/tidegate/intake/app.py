"""The HTTP front door: ``POST /interchanges`` over the pipeline, and nothing else.

The layer is thin on purpose: it authenticates, reads the body within its limits and
hands it to :class:`~tidegate.intake.pipeline.IntakePipeline` on a worker thread
(the pipeline talks to Redis synchronously). Every refusal is one typed error mapped
to its status in :func:`_refusal`, so the answers are the same whatever raised them.

Limits are checked before memory is spent: a ``Content-Length`` above the limit is
answered 413 without reading a byte of the body, a body without one is read in
chunks and cut off as soon as it passes the limit, and the whole upload must arrive
within ``read_timeout_s`` (a stalled sender does not hold a connection forever). A
refusal that leaves body unread closes the connection (``Connection: close``), so the
server does not go on receiving the rest of it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidegate.edi.errors import LocatedEdifactError
from tidegate.errors import ConfigurationError, EdifactError, PayloadTooLarge
from tidegate.intake.auth import ANONYMOUS, ApiKeys, Client
from tidegate.intake.errors import (
    BodyTooLarge,
    IntakeError,
    UnacceptableInterchange,
    UploadTimedOut,
)
from tidegate.intake.pipeline import IntakePipeline
from tidegate.logging import get_logger

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_READ_TIMEOUT_S", "Limits", "create_app"]

log = get_logger("tidegate.intake")

#: Largest body taken: 64 MiB, several times the largest real manifest.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
#: Time allowed for a whole upload to arrive, seconds.
DEFAULT_READ_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may cost.

    Args:
        max_body_bytes: larger bodies are answered 413.
        read_timeout_s: the whole body must arrive within this, else 408.

    Raises:
        ConfigurationError: a limit that is not a positive finite number.
    """

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S

    def __post_init__(self) -> None:
        if isinstance(self.max_body_bytes, bool) or self.max_body_bytes < 1:
            raise ConfigurationError(f"max_body_bytes must be >= 1, got {self.max_body_bytes!r}")
        if not (math.isfinite(self.read_timeout_s) and self.read_timeout_s > 0):
            raise ConfigurationError(
                f"read_timeout_s must be a finite number > 0, got {self.read_timeout_s!r}"
            )


async def _read_body(request: Request, limits: Limits) -> bytes:
    announced = request.headers.get("content-length")
    if announced is not None:
        if not announced.strip().isdigit():
            raise UnacceptableInterchange("bad_content_length", "Content-Length is not a number")
        if int(announced) > limits.max_body_bytes:
            raise BodyTooLarge(limits.max_body_bytes, announced=int(announced))
    body = bytearray()
    try:
        with anyio.fail_after(limits.read_timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limits.max_body_bytes:
                    raise BodyTooLarge(limits.max_body_bytes)
    except TimeoutError:
        raise UploadTimedOut(limits.read_timeout_s) from None
    return bytes(body)


def _refusal(
    exc: IntakeError | EdifactError | PayloadTooLarge, client: Client | None, *, unread: bool
) -> Response:
    if isinstance(exc, IntakeError):
        status = exc.http_status
        code = exc.reason_code if isinstance(exc, UnacceptableInterchange) else exc.code
    elif isinstance(exc, PayloadTooLarge):
        status, code = 413, "unit_too_large"
    else:
        status = 400
        code = exc.code if isinstance(exc, LocatedEdifactError) else "edifact"
    log.info(
        "intake_refused",
        code=code,
        http_status=status,
        client=client.name if client is not None else None,
    )
    body: dict[str, Any] = {
        "status": "rejected",
        "error": {"code": code, "message": str(exc)},
        "contrl": None,
        "interchange": None,
        "units": 0,
    }
    # A body left unread is closed on, not drained: without ``Connection: close`` the
    # server would read (and discard) the rest of a 1 GB upload to reuse the connection.
    headers = {"connection": "close"} if unread else None
    return JSONResponse(body, status_code=status, headers=headers)


def create_app(
    pipeline: IntakePipeline,
    *,
    keys: ApiKeys | None = None,
    allow_anonymous: bool = False,
    limits: Limits | None = None,
) -> Starlette:
    """The ASGI application.

    Args:
        pipeline: decides and publishes.
        keys: the API keys; required unless ``allow_anonymous``.
        allow_anonymous: take every request as :data:`~tidegate.intake.auth.ANONYMOUS`.
        limits: body size and upload time limits.

    Raises:
        ConfigurationError: neither keys nor ``allow_anonymous``.
    """
    if keys is None and not allow_anonymous:
        raise ConfigurationError("the intake needs API keys, or allow_anonymous=True")
    bounds = limits if limits is not None else Limits()

    def authenticate(request: Request) -> Client:
        if keys is None:
            return ANONYMOUS
        return keys.authenticate(request.headers.get("authorization"))

    async def post_interchange(request: Request) -> Response:
        client: Client | None = None
        unread = True
        try:
            client = authenticate(request)
            body = await _read_body(request, bounds)
            unread = False
            decision = await run_in_threadpool(pipeline.submit, body, client)
            pipeline.fault.reached("before_ack")
        except (IntakeError, EdifactError, PayloadTooLarge) as exc:
            return _refusal(exc, client, unread=unread)
        headers = {}
        if decision.retry_after_s is not None:
            headers["Retry-After"] = str(decision.retry_after_s)
        return JSONResponse(decision.body, status_code=decision.http_status, headers=headers)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            # The publishing thread finishes what it was handed, then stops.
            await run_in_threadpool(pipeline.close)

    return Starlette(
        routes=[
            Route("/interchanges", post_interchange, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
