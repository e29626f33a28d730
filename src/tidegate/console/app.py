"""The console's web layer: pages, live fragments, actions — and nothing else.

Every request is authenticated first (:mod:`~tidegate.console.access`); every action
is a POST that carries the page's CSRF token, comes from the console's own origin and
is confirmed on a second page before anything is written. Reads and actions are
synchronous Redis calls, run on worker threads. Each typed refusal is answered with
its status in :func:`_refusal`, so the answers are the same whatever raised them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jinja2
import redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tidegate.console.access import User, Users
from tidegate.console.actions import CONFIRMED, Actions, Publish, ReplayQuarantine
from tidegate.console.chart_view import CachedCharts
from tidegate.console.csrf import CsrfTokens
from tidegate.console.errors import BadAction, ConsoleError, CsrfRefused, Unauthenticated
from tidegate.console.labels import downstream_label, duration_label, queue_label
from tidegate.console.reads import DEFAULT_DISCOVER_EVERY_S, ConsoleReads, RedisReads
from tidegate.console.sampler import DEFAULT_SAMPLE_EVERY_S, HistorySampler
from tidegate.errors import BackendError
from tidegate.logging import get_logger

__all__ = ["DEFAULT_REFRESH_S", "ConsoleConfig", "create_app"]

log = get_logger("tidegate.console")

#: How often the page refreshes each live view, seconds.
DEFAULT_REFRESH_S = 2.0
#: Largest action form read, bytes: a form has a few short fields.
_MAX_FORM_BYTES = 4096

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": under it Chromium sends "Origin: null" with the console's own
    # forms, and :func:`_same_origin` could no longer tell them from a sandboxed forgery.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_VIEWS = ("gates", "queues", "held", "charts")


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """How one console runs.

    Args:
        users: who may sign in, and whether anonymous reading is allowed.
        prefix: tidegate's key prefix.
        gates: gates always shown (others are discovered in the keyspace).
        publish: republishes a dead letter; ``None`` turns replay off.
        replay_quarantine: gives quarantined documents back to the intake; ``None``
            turns that replay off.
        refresh_s: live refresh period of the page.
        history_every_s: period of the charts' points (:mod:`~tidegate.console.sampler`);
            the charts refresh at that period. ``0``: this console takes no turn at
            sampling and only shows what other consoles sample.
        discover_every_s: how often new gates are looked for.
        csrf_secret: fixed CSRF key (tests); random per process when ``None``.
        gate_env: the gates' defaults (``TIDEGATE_<NAME>_{RATE,BURST,CONCURRENCY}``)
            as the workers have them; this process's environment when ``None``.
    """

    users: Users
    prefix: str
    gates: tuple[str, ...] = ()
    publish: Publish | None = None
    replay_quarantine: ReplayQuarantine | None = None
    refresh_s: float = DEFAULT_REFRESH_S
    history_every_s: float = DEFAULT_SAMPLE_EVERY_S
    discover_every_s: float = DEFAULT_DISCOVER_EVERY_S
    csrf_secret: bytes | None = None
    gate_env: Mapping[str, str] | None = None


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tidegate.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = duration_label
    env.filters["queue_label"] = queue_label
    return env


def _refusal(exc: ConsoleError | BackendError, env: jinja2.Environment) -> Response:
    if isinstance(exc, ConsoleError):
        status, message = exc.http_status, str(exc)
    else:
        # redis-py's text names hosts and ports: it goes to the log, not to every viewer.
        status, message = 503, "the fleet's Redis is unreachable or failing; see the console log"
        log.error("console_backend_error", error=type(exc).__name__, detail=str(exc))
    body = env.get_template("refused.html").render(status=status, message=message)
    headers = dict(_HEADERS)
    if isinstance(exc, Unauthenticated):
        headers["WWW-Authenticate"] = 'Basic realm="tidegate console", charset="UTF-8"'
    return HTMLResponse(body, status_code=status, headers=headers)


def _same_origin(request: Request) -> None:
    """A browser names the page a POST comes from; it must be the console itself."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        if origin == "null":
            raise CsrfRefused("the action came from an opaque origin")
        return
    if urlsplit(origin).netloc != request.headers.get("host"):
        raise CsrfRefused("the action came from another site")


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded action form, read within its limit (no multipart: none is needed)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            raise BadAction("the form is too large")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise BadAction("the form is not UTF-8") from None
    return dict(pairs)


def create_app(
    client: redis.Redis, config: ConsoleConfig, *, reads: ConsoleReads | None = None
) -> Starlette:
    """The console application over ``client``.

    Args:
        client: a sync Redis client (reads and actions go through it).
        config: see :class:`ConsoleConfig`.
        reads: what the views read instead of ``client`` (a
            :class:`~tidegate.console.memory.MemoryReads` in tests); actions and the
            charts' sampler still use ``client``.
    """
    env = _templates()
    if reads is None:
        reads = RedisReads(
            client,
            prefix=config.prefix,
            gates=config.gates,
            discover_every_s=config.discover_every_s,
            gate_env=config.gate_env,
        )
    actions = Actions(
        client,
        prefix=config.prefix,
        publish=config.publish,
        replay_quarantine=config.replay_quarantine,
        gates=reads.gate_names,
    )
    csrf = CsrfTokens(config.csrf_secret)
    chart_every_s = config.history_every_s or DEFAULT_SAMPLE_EVERY_S
    charts = CachedCharts(reads, every_s=chart_every_s)
    sampler = (
        HistorySampler(
            client,
            prefix=config.prefix,
            gates=reads.gate_names,
            every_s=config.history_every_s,
            gate_env=config.gate_env,
        )
        if config.history_every_s > 0
        else None
    )

    def guarded(
        handler: Callable[[Request, User], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                user = await run_in_threadpool(
                    config.users.authenticate, request.headers.get("authorization")
                )
                return await handler(request, user)
            except (ConsoleError, BackendError) as exc:
                return _refusal(exc, env)

        return endpoint

    def view_context(view: str) -> dict[str, Any]:
        if view == "gates":
            return {"gates": reads.gates(reads.gate_names())}
        if view == "queues":
            return {"queues": reads.queues()}
        if view == "charts":
            return charts()
        letters, shed, lot = reads.held_back()
        return {"letters": letters, "shed": shed, "parked": lot}

    def render(name: str, code: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(
            env.get_template(name).render(**context), status_code=code, headers=_HEADERS
        )

    async def page(request: Request, user: User) -> Response:
        def read_all() -> dict[str, Any]:
            context: dict[str, Any] = {}
            for view in _VIEWS:
                context.update(view_context(view))
            return context

        context = await run_in_threadpool(read_all)
        return render(
            "page.html",
            user=user,
            csrf=csrf.token_for(user.name),
            refresh_ms=round(config.refresh_s * 1000),
            charts_ms=round(chart_every_s * 1000),
            replay_on=config.publish is not None,
            release_on=config.replay_quarantine is not None,
            operator=user.role.value == "operator",
            **context,
        )

    async def live(request: Request, user: User) -> Response:
        view = request.path_params["view"]
        if view not in _VIEWS:
            return render("refused.html", 404, status=404, message="no such view")
        context = await run_in_threadpool(view_context, view)
        return render(f"{view}.html", **context)

    async def act(request: Request, user: User) -> Response:
        action = request.path_params["action"]
        form: dict[str, str] = {}
        try:
            _same_origin(request)
            form = await _form(request)
            csrf.check(user.name, form.get("csrf"))
        except ConsoleError as exc:
            actions.audit(
                user, action, form.get("target", ""), "refused", {"error": type(exc).__name__}
            )
            raise
        target = form.get("target", "")
        actions.authorize(user, action, target)
        if action in CONFIRMED and form.get("confirmed") != "yes":
            return render(
                "confirm.html",
                action=action,
                target=downstream_label(target) if action in _GATE_ACTIONS else target,
                fields=_shown_fields(form),
                hidden={k: v for k, v in form.items() if k != "confirmed"},
            )
        outcome = await run_in_threadpool(actions.run, user, action, target, form)
        return render("done.html", outcome=outcome, target=target)

    return Starlette(
        lifespan=_lifespan(sampler),
        routes=[
            Route("/", guarded(page)),
            Route("/live/{view}", guarded(live)),
            Route("/act/{action}", guarded(act), methods=["POST"]),
            Mount("/static", StaticFiles(packages=[("tidegate.console", "static")])),
        ],
    )


#: Actions whose target is a gate (shown by its port name on the confirmation page).
_GATE_ACTIONS = frozenset({"pause", "resume", "retune"})


def _lifespan(
    sampler: HistorySampler | None,
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """Runs the charts' sampler for as long as the server serves."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(_sample_forever(sampler)) if sampler is not None else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    return lifespan


async def _sample_forever(sampler: HistorySampler) -> None:
    """The charts' timer: one turn per period; a failing Redis costs a log line, not
    the console."""
    while True:
        started = time.monotonic()
        try:
            await run_in_threadpool(sampler.tick)
        except BackendError as exc:
            log.warning("console_history_skipped", error=type(exc).__name__)
        await asyncio.sleep(max(0.0, sampler.every_s - (time.monotonic() - started)))


def _shown_fields(form: Mapping[str, str]) -> dict[str, str]:
    """The values an operator is asked to confirm (never the CSRF token)."""
    return {k: v for k, v in form.items() if k not in {"csrf", "confirmed", "target"} and v}
