"""The fleet-wide backend: every decision is one EVALSHA of a ``.lua`` script.

The clock is Redis ``TIME`` unless a test injects ``now_ms``: hosts never compare their
own clocks. The sync and asyncio backends share the argument encoding and result
decoding below and differ only in awaiting the client.

The admission call is the hot path of every gated task, so it is kept lean: a plain
rate limit runs the one-key ``rate_acquire.lua`` instead of the whole gate script; its
command is encoded once per shape and cached, both as arguments and as the finished
RESP frame; replies are integers. The sync backend writes that frame straight to a
pooled connection and reads the reply (the same pool, retry policy and errors as
redis-py's ``execute_command``, without its per-command packing and bookkeeping); the
script is loaded on NOSCRIPT — after a Redis restart, say — and the call retried once.
The other scripts go through redis-py's ``register_script``.

Why one module of ~450 lines: the sync and asyncio backends are twins that share the
argument encoding, the one-frame request cache and the result decoding above; apart,
the twins would drift, which is what this layout prevents.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import redis
import redis.asyncio
import redis.exceptions

from tidegate._redis import (
    blocking_timeout_s,
    lua_script,
    map_redis_errors,
    translate_redis_error,
)
from tidegate.flow.backends.base import (
    AcquireParams,
    AcquireResult,
    GateKeys,
    GateSnapshot,
    Status,
)
from tidegate.flow.backends.memory import ManualClock

__all__ = ["AsyncRedisBackend", "RedisBackend"]

#: Wake-up tokens only matter to waiters blocked right now; stale ones expire.
_WAKE_TTL_MS = 60_000


def _now_arg(clock: ManualClock | None) -> str:
    """``""`` lets the script read Redis TIME; a test clock passes its own time."""
    return "" if clock is None else repr(clock.now_ms())


_STATUSES = tuple(Status)
_RATE, _GATE = "rate_acquire", "gate_acquire"
_TEXT = {name: lua_script(name) for name in (_RATE, _GATE)}
_SHA = {
    name: hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
    for name, text in _TEXT.items()
}
_SHA_BYTES = {name: sha.encode() for name, sha in _SHA.items()}


def _enc(value: str | int | float) -> bytes:
    return (repr(value) if isinstance(value, float) else str(value)).encode()


def _rate_only(p: AcquireParams) -> bool:
    """Whether the one-key rate script decides alone: no cap, no pause, no live config.

    A no-lease limit (``leases=False``) with a cap still takes the gate script, which
    ignores the cap (flag ``n``) and counts the admission."""
    return (
        p.rate > 0 and p.tokens and p.concurrency == 0 and not p.check_pause and not p.read_config
    )


#: Where ``now`` sits in each command (after EVALSHA, sha, numkeys and the keys).
_NOW_AT = {9: 4, 17: 8}


def _bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(arg), arg)


def _frame(bulks: Sequence[bytes]) -> tuple[bytes]:
    """Bulk strings as one RESP array (the bytes redis-py would send), in the 1-tuple
    that ``Connection.send_packed_command`` takes."""
    return (b"*%d\r\n%b" % (len(bulks), b"".join(bulks)),)


_LOAD = {
    name: _frame([_bulk(b"SCRIPT"), _bulk(b"LOAD"), _bulk(text.encode())])
    for name, text in _TEXT.items()
}


class _Request(NamedTuple):
    """One admission command: its arguments, each as a RESP bulk string, the whole RESP
    frame, and its script."""

    args: tuple[bytes, ...]
    bulks: tuple[bytes, ...]
    frame: tuple[bytes]
    script: str


def _request(args: Sequence[bytes], bulks: Sequence[bytes]) -> _Request:
    script = _RATE if args[1] == _SHA_BYTES[_RATE] else _GATE
    return _Request(tuple(args), tuple(bulks), _frame(bulks), script)


@functools.lru_cache(maxsize=4096)
def _encoded(keys: GateKeys, p: AcquireParams) -> _Request:
    """EVALSHA and its arguments for one decision shape (``now``/holder blank), encoded once."""
    if _rate_only(p):
        args: tuple[str | int | float, ...] = (
            "EVALSHA",
            _SHA[_RATE],
            1,
            keys.tat,
            "",
            p.cost,
            1000.0 / p.rate,
            p.burst,
            p.max_wait_ms,
        )
    else:
        flags = (
            ("p" if p.check_pause else "")
            + ("c" if p.read_config else "")
            + ("" if p.leases else "n")
            + ("" if p.tokens else "t")
        )
        args = (
            "EVALSHA",
            _SHA[_GATE],
            5,
            *keys.as_list(),
            "",
            p.cost,
            p.rate,
            p.burst,
            p.concurrency,
            p.lease_ms,
            p.max_wait_ms,
            "",
            flags,
        )
    encoded = [_enc(v) for v in args]
    return _request(encoded, [_bulk(arg) for arg in encoded])


def _varies(p: AcquireParams, clock: ManualClock | None) -> bool:
    """Whether the command carries per-call values (a holder id, a test clock's time)."""
    return bool(p.holder) or p.now_ms is not None or clock is not None


def _command(keys: GateKeys, p: AcquireParams, clock: ManualClock | None) -> _Request:
    """The command for one decision; the cached shape, with ``now`` and the holder filled in."""
    if not _varies(p, clock):
        return _encoded(keys, p)
    shape = _encoded(keys, p._replace(holder="", now_ms=None))
    now = p.now_ms if p.now_ms is not None else (clock.now_ms() if clock is not None else None)
    args, bulks = list(shape.args), list(shape.bulks)
    if now is not None:
        at = _NOW_AT[len(args)]
        args[at] = repr(now).encode()
        bulks[at] = _bulk(args[at])
    if p.holder:
        args[-2] = p.holder.encode()
        bulks[-2] = _bulk(args[-2])
    return _request(args, bulks)


#: ``AcquireResult``'s own ``__new__`` is a Python function; building the tuple directly
#: saves that call on every decision.
_new_result = tuple.__new__


def _decode(raw: Sequence[int]) -> AcquireResult:
    if len(raw) == 4:  # rate_acquire: status, wait_us, remaining, now_us (no lease)
        return _new_result(
            AcquireResult,
            (_STATUSES[raw[0]], raw[1] / 1000.0, raw[2], 0, False, raw[3] / 1000.0, None),
        )
    # gate_acquire: status, wait_us, remaining, reclaimed, leased, now_us, lease_us
    return AcquireResult(
        _STATUSES[raw[0]],
        raw[1] / 1000.0,
        raw[2],
        raw[3],
        raw[4] == 1,
        raw[5] / 1000.0,
        raw[6] / 1000.0,
    )


def _snapshot(results: list[Any], clock: ManualClock | None) -> GateSnapshot:
    """Build a snapshot from the pipeline [HGETALL config, HGETALL pause, ZCARD, GET tat,
    GET admitted, TIME]."""
    config, pause, held, tat, admitted, now = results
    seconds, micros = now
    now_ms = clock.now_ms() if clock is not None else int(seconds) * 1000 + int(micros) / 1000
    until = pause.get(b"until_ms")
    reason = pause.get(b"reason")
    return GateSnapshot(
        config={k.decode(): float(v) for k, v in config.items()},
        paused_until_ms=float(until) if until is not None else None,
        pause_reason=reason.decode() if reason is not None else None,
        leases_held=held,
        tat_ms=float(tat) if tat is not None else None,
        now_ms=now_ms,
        admitted_total=int(admitted) if admitted is not None else 0,
    )


_EXECUTE_COMMAND = redis.Redis.execute_command


def _get_connection_args(pool: Any) -> tuple[str, ...]:
    """What ``pool.get_connection`` needs: nothing (redis-py >= 5.3 deprecates arguments)
    or, before that, the command name."""
    try:
        param = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):
        return ()
    return ("EVALSHA",) if param is not None and param.default is param.empty else ()


def _roundtrip(conn: Any, frame: tuple[bytes]) -> Any:
    """One command on ``conn``: the ready frame out, its reply in (errors are raised)."""
    conn.send_packed_command(frame)
    return conn.read_response()


class _Requests:
    """The admission command for a decision, shared by the sync and asyncio backends."""

    clock: ManualClock | None
    # The last (params, keys, request) without per-call values: a limiter asks with the
    # same two objects every time, so the hot path skips even the cache's hashing. One
    # tuple, swapped whole, so a thread never sees half of another's update.
    _last: tuple[object, object, _Request | None] = (None, None, None)

    def _request_for(self, keys: GateKeys, params: AcquireParams) -> _Request:
        last = self._last
        if last[0] is params and last[1] is keys and last[2] is not None:
            return last[2]
        request = _command(keys, params, self.clock)
        if not _varies(params, self.clock):
            self._last = (params, keys, request)
        return request


class RedisBackend(_Requests):
    """Fleet-wide state in Redis.

    Args:
        client: a ``redis.Redis``; build one with ``tidegate._redis.client_from_url``
            to get tidegate's timeouts.
    """

    def __init__(self, client: redis.Redis, *, clock: ManualClock | None = None) -> None:
        self.client = client
        self.clock = clock
        self._release = client.register_script(lua_script("lease_release"))
        self._renew = client.register_script(lua_script("lease_renew"))
        self._pause = client.register_script(lua_script("gate_pause"))
        self._pool_args = _get_connection_args(client.connection_pool)
        # Straight to a pooled connection unless the client pins one connection (it has
        # its own lock) or its execute_command is replaced or instrumented (e.g. tracing),
        # which must keep seeing every command.
        execute = type(client).execute_command
        self._direct = (
            client.connection is None
            and execute is _EXECUTE_COMMAND
            and not hasattr(execute, "__wrapped__")
        )

    def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult:
        request = self._request_for(keys, params)
        try:
            raw = self._evalsha(request) if self._direct else self._execute(request)
        except (redis.exceptions.RedisError, OSError) as exc:
            raise translate_redis_error(exc, "gate acquire") from exc
        return _decode(raw)

    def _evalsha(self, request: _Request) -> Any:
        """Send the ready frame on a pooled connection and read the reply.

        What redis-py's ``execute_command`` does, minus packing the arguments again and its
        per-command bookkeeping: a connection from the pool per call (so threads never
        share one), the connection's retry policy for connection errors and timeouts
        (the failed connection is dropped and reconnected), the connection back to the
        pool in ``finally``. On NOSCRIPT the script is loaded over the same connection
        and the command sent once more.
        """
        pool = self.client.connection_pool
        conn = pool.get_connection(*self._pool_args)
        try:
            roundtrip = functools.partial(_roundtrip, conn, request.frame)
            try:
                return conn.retry.call_with_retry(roundtrip, conn.disconnect)
            except redis.exceptions.NoScriptError:
                load = functools.partial(_roundtrip, conn, _LOAD[request.script])
                conn.retry.call_with_retry(load, conn.disconnect)
                return conn.retry.call_with_retry(roundtrip, conn.disconnect)
        finally:
            pool.release(conn)

    def _execute(self, request: _Request) -> Any:
        """The same command through redis-py's ``execute_command``."""
        execute = self.client.execute_command
        try:
            return execute(*request.args)  # type: ignore[no-untyped-call]
        except redis.exceptions.NoScriptError:
            self.client.script_load(_TEXT[request.script])
            return execute(*request.args)  # type: ignore[no-untyped-call]

    def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool:
        with map_redis_errors("lease release"):
            removed = self._release(
                [keys.leases, keys.released], [holder, max(1, wake_cap), _WAKE_TTL_MS]
            )
        return bool(removed)

    def renew(self, keys: GateKeys, holder: str, lease_ms: float, *, restore: bool = False) -> int:
        args = [holder, repr(lease_ms), _now_arg(self.clock), "1" if restore else ""]
        with map_redis_errors("lease renew"):
            return int(self._renew([keys.leases], args))

    def wait_released(self, keys: GateKeys, timeout_s: float) -> None:
        if self.clock is not None:
            self.clock.advance(timeout_s)
            return
        with map_redis_errors("lease wait"):
            self.client.blpop([keys.released], timeout=blocking_timeout_s(self.client, timeout_s))

    def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]:
        with map_redis_errors("gate pause"):
            until, extended = self._pause(
                [keys.pause], [_now_arg(self.clock), repr(pause_ms), reason]
            )
        return float(until), extended == b"1"

    def resume(self, keys: GateKeys) -> None:
        with map_redis_errors("gate resume"):
            self.client.delete(keys.pause)

    def write_config(self, keys: GateKeys, values: dict[str, float]) -> None:
        with map_redis_errors("gate configure"):
            self.client.hset(keys.config, mapping={k: repr(v) for k, v in values.items()})

    def snapshot(self, keys: GateKeys) -> GateSnapshot:
        with map_redis_errors("gate snapshot"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(keys.config)
            pipe.hgetall(keys.pause)
            pipe.zcard(keys.leases)
            pipe.get(keys.tat)
            pipe.get(keys.admitted)
            pipe.time()
            results = pipe.execute()
        return _snapshot(results, self.clock)

    def sleep(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def monotonic(self) -> float:
        return self.clock.monotonic() if self.clock is not None else time.monotonic()


class AsyncRedisBackend(_Requests):
    """The asyncio twin of :class:`RedisBackend` over ``redis.asyncio.Redis``."""

    def __init__(self, client: redis.asyncio.Redis, *, clock: ManualClock | None = None) -> None:
        self.client = client
        self.clock = clock
        self._release = client.register_script(lua_script("lease_release"))
        self._renew = client.register_script(lua_script("lease_renew"))
        self._pause = client.register_script(lua_script("gate_pause"))

    async def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult:
        request = self._request_for(keys, params)
        execute = self.client.execute_command
        try:
            try:
                raw = await execute(*request.args)  # type: ignore[no-untyped-call]
            except redis.exceptions.NoScriptError:
                await self.client.script_load(_TEXT[request.script])
                raw = await execute(*request.args)  # type: ignore[no-untyped-call]
        except (redis.exceptions.RedisError, OSError) as exc:
            raise translate_redis_error(exc, "gate acquire") from exc
        return _decode(raw)

    async def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool:
        with map_redis_errors("lease release"):
            removed = await self._release(
                [keys.leases, keys.released], [holder, max(1, wake_cap), _WAKE_TTL_MS]
            )
        return bool(removed)

    async def renew(
        self, keys: GateKeys, holder: str, lease_ms: float, *, restore: bool = False
    ) -> int:
        args = [holder, repr(lease_ms), _now_arg(self.clock), "1" if restore else ""]
        with map_redis_errors("lease renew"):
            return int(await self._renew([keys.leases], args))

    async def wait_released(self, keys: GateKeys, timeout_s: float) -> None:
        if self.clock is not None:
            self.clock.advance(timeout_s)
            return
        with map_redis_errors("lease wait"):
            await self.client.blpop(
                [keys.released], timeout=blocking_timeout_s(self.client, timeout_s)
            )

    async def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]:
        with map_redis_errors("gate pause"):
            until, extended = await self._pause(
                [keys.pause], [_now_arg(self.clock), repr(pause_ms), reason]
            )
        return float(until), extended == b"1"

    async def resume(self, keys: GateKeys) -> None:
        with map_redis_errors("gate resume"):
            await self.client.delete(keys.pause)

    async def write_config(self, keys: GateKeys, values: dict[str, float]) -> None:
        with map_redis_errors("gate configure"):
            await self.client.hset(keys.config, mapping={k: repr(v) for k, v in values.items()})

    async def snapshot(self, keys: GateKeys) -> GateSnapshot:
        with map_redis_errors("gate snapshot"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(keys.config)
            pipe.hgetall(keys.pause)
            pipe.zcard(keys.leases)
            pipe.get(keys.tat)
            pipe.get(keys.admitted)
            pipe.time()
            results = await pipe.execute()
        return _snapshot(results, self.clock)

    async def sleep(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    def monotonic(self) -> float:
        return self.clock.monotonic() if self.clock is not None else time.monotonic()
