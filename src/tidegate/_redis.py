"""The one boundary between redis-py and tidegate.

Clients are built from URLs here (``redis://``, ``rediss://`` for TLS, ``user:password@``
for AUTH/ACL), Lua package data is loaded here, and redis-py's exceptions are
translated here into :class:`~tidegate.errors.BackendUnavailable` (with
:class:`~tidegate.errors.BackendUnwritable` for a server that answers but refuses
writes) / :class:`~tidegate.errors.BackendError`, so nothing above this module catches
a redis-py type.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
from collections.abc import Callable, Iterator
from typing import cast
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.exceptions

from tidegate.errors import (
    BackendError,
    BackendUnavailable,
    BackendUnwritable,
    ConfigurationError,
)

__all__ = [
    "MIN_BLOCK_S",
    "async_client_from_url",
    "blocking_timeout_s",
    "client_from_url",
    "clock_ms",
    "hash_pages",
    "lua_script",
    "map_redis_errors",
    "redact_url",
    "script_now_ms",
    "text",
    "translate_redis_error",
    "unwritable_cause",
]

_SCHEMES = ("redis", "rediss", "unix")
#: Socket timeouts keep a dead Redis from hanging a worker forever: a decision that
#: cannot be made within this is a BackendUnavailable, and the gate fails closed.
_SOCKET_TIMEOUT_S = 5.0


#: The shortest timeout a blocking pop (``BLPOP``) is given, seconds. Redis 6.2 turns
#: the fractional seconds into whole milliseconds by truncation, and 0 means "block
#: forever": a ``BLPOP`` of 0.4 ms, or of 1 ms (0.001 parses a hair under it), blocked
#: until the client's socket timeout, which reads as "Redis unreachable". Redis times
#: a blocked client out on its own clock (every 100 ms at the default ``hz``) anyway,
#: so a floor of 10 ms costs nothing.
MIN_BLOCK_S = 0.01


def blocking_timeout_s(client: redis.Redis | redis.asyncio.Redis, timeout_s: float) -> float:
    """The ``BLPOP`` timeout for a wait of up to ``timeout_s``: at least
    :data:`MIN_BLOCK_S`, and under the client's socket timeout — a block as long as it
    is a read timeout, which reads as "Redis unreachable" and requeued units for
    nothing (a lease wait of 10 s against tidegate's 5-s socket timeout in the RQ
    demo). A waiter decides again after every wake, so a shorter block costs one more
    round trip, not a lost wake. BLPOP takes a float timeout (Redis >= 6)."""
    socket_s = client.connection_pool.connection_kwargs.get("socket_timeout")
    if isinstance(socket_s, int | float) and socket_s > 0:
        timeout_s = min(timeout_s, max(socket_s / 2, socket_s - 1.0))
    return max(MIN_BLOCK_S, timeout_s)


def _check_url(url: str) -> None:
    scheme = urlsplit(url).scheme
    if scheme not in _SCHEMES:
        raise ConfigurationError(
            f"unsupported Redis URL scheme {scheme!r} in {redact_url(url)}; "
            "use redis://, rediss:// or unix://"
        )


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (safe to print or log)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def client_from_url(url: str, **kwargs: object) -> redis.Redis:
    """A sync client for ``url`` with tidegate's timeouts (override with ``kwargs``)."""
    _check_url(url)
    options: dict[str, object] = {
        "socket_timeout": _SOCKET_TIMEOUT_S,
        "socket_connect_timeout": _SOCKET_TIMEOUT_S,
        "health_check_interval": 30,
    }
    options.update(kwargs)
    return redis.Redis.from_url(url, **options)


def async_client_from_url(url: str, **kwargs: object) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`client_from_url`."""
    _check_url(url)
    options: dict[str, object] = {
        "socket_timeout": _SOCKET_TIMEOUT_S,
        "socket_connect_timeout": _SOCKET_TIMEOUT_S,
    }
    options.update(kwargs)
    return redis.asyncio.Redis.from_url(url, **options)  # type: ignore[arg-type]


_INCLUDE = "--!include "
_SHARED_LUA = "tidegate.flow.backends"


@functools.cache
def lua_script(name: str, package: str = _SHARED_LUA) -> str:
    """The text of ``<package>/lua/<name>.lua``, package data read once per process.

    A line ``--!include other`` is replaced by ``other.lua`` from the same folder, or from
    ``tidegate/flow/backends/lua`` where the shared pieces (``clock``, ``gcra``) live:
    Redis Lua has no modules, and scripts that share code should not each carry a copy.
    """
    resource = importlib.resources.files(package).joinpath("lua", f"{name}.lua")
    if not resource.is_file() and package != _SHARED_LUA:
        return lua_script(name, _SHARED_LUA)  # shared pieces (clock, gcra) live in one place
    lines = resource.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(
        lua_script(line[len(_INCLUDE) :].strip(), package) if line.startswith(_INCLUDE) else line
        for line in lines
    )


#: Reply prefixes of a server that is up but refuses writes, by cause. A Lua script
#: that hits one reports it inside an ``ERR Error running script`` reply, so the
#: prefix is looked for after a space too.
_UNWRITABLE_REPLIES = {"OOM": "oom", "READONLY": "readonly", "MISCONF": "misconf"}


def unwritable_cause(exc: BaseException) -> str | None:
    """``"oom"``, ``"readonly"`` or ``"misconf"`` when ``exc`` is a refused write, else ``None``.

    Shared with the broker's QoS (:mod:`tidegate.integrations.celery.broker`), which
    sees the same redis-py errors from kombu.
    """
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return "oom"
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return "readonly"
    if not isinstance(exc, redis.exceptions.ResponseError):
        return None
    message = str(exc)
    for prefix, cause in _UNWRITABLE_REPLIES.items():
        if message.startswith(prefix) or f" {prefix} " in message or f"-{prefix} " in message:
            return cause
    if "command not allowed when used memory" in message:
        return "oom"
    if "write against a read only replica" in message:
        return "readonly"
    return None


def refused_write_in_chain(exc: BaseException) -> str | None:
    """:func:`unwritable_cause` of the first refused write anywhere in ``exc``'s chain
    (kombu and Celery wrap redis-py's errors in their own), or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BackendUnwritable):
            return current.cause
        cause = unwritable_cause(current)
        if cause is not None:
            return cause
        current = current.__cause__ or current.__context__
    return None


def translate_redis_error(exc: BaseException, operation: str) -> BackendError:
    """The tidegate error for a redis-py (or socket) error; raise it ``from exc``."""
    cause = unwritable_cause(exc)
    if cause is not None:
        return BackendUnwritable(cause, operation)
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | OSError):
        return BackendUnavailable(f"Redis unreachable during {operation}: {exc}")
    return BackendError(f"Redis error during {operation}: {exc}")


@contextlib.contextmanager
def map_redis_errors(operation: str) -> Iterator[None]:
    """Translate redis-py errors raised inside the block into tidegate's tree."""
    try:
        yield
    except (redis.exceptions.RedisError, OSError) as exc:
        raise translate_redis_error(exc, operation) from exc


def hash_pages(
    client: redis.Redis, name: str, page: int, operation: str
) -> Iterator[dict[bytes, bytes]]:
    """A hash's fields and values, about ``page`` at a time (HSCAN): for whatever may be
    as large as a backlog and must never be read, or held, whole."""
    cursor = 0
    while True:
        with map_redis_errors(operation):
            cursor, fields = cast(
                "tuple[int, dict[bytes, bytes]]", client.hscan(name, cursor, count=page)
            )
        if fields:
            yield fields
        if cursor == 0:
            return


def clock_ms(client: redis.Redis, clock: Callable[[], float] | None, operation: str) -> float:
    """A store's "now", ms since the epoch: the injected ``clock`` (a test's manual one),
    else the server's ``TIME`` — the fleet clock every worker reads alike, whatever its
    host's own clock says."""
    if clock is not None:
        return float(clock())
    with map_redis_errors(operation):
        seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) / 1000


def text(value: object) -> str:
    """A reply's value as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


def script_now_ms(clock: Callable[[], float] | None) -> str:
    """A script's ``now_ms`` ARGV: the injected clock's time, or "" — the scripts then
    read Redis ``TIME`` themselves, in the same atomic step."""
    return "" if clock is None else repr(float(clock()))
