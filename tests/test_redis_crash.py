"""EmbeddedRedis.crash: what a host crash loses, which killing the process does not."""

from __future__ import annotations

import pytest
import redis

from tidegate.errors import ConfigurationError
from tidegate.redis_server import EmbeddedRedis

pytestmark = pytest.mark.redis


def _written(server: EmbeddedRedis, size: int) -> int:
    """The AOF's size once it has grown past ``size`` (see ``EmbeddedRedis.aof_grown``)."""
    grown = server.aof_grown(size)
    assert grown > size, "redis never wrote the AOF"
    return grown


def _restart_and_read(server: EmbeddedRedis, keys: list[str]) -> list[bytes | None]:
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        return [client.get(k) for k in keys]
    finally:
        client.close()


def test_a_process_kill_loses_nothing_a_host_crash_loses_the_tail() -> None:
    """Redis writes the AOF before it answers, so a SIGKILL keeps every answered write;
    a crash cut back to an earlier size loses the writes after it, whole."""
    server = EmbeddedRedis(appendonly=True).start()
    try:
        client = redis.Redis.from_url(server.url)
        size = server.aof_size()
        client.set("before", "1")
        size = _written(server, size)
        client.set("after", "2")
        _written(server, size)
        client.close()
        server.kill()
        killed = _restart_and_read(server, ["before", "after"])
        client = redis.Redis.from_url(server.url)
        kept = server.aof_size()
        client.set("later", "3")
        _written(server, kept)
        client.close()
        cut = server.crash(keep_aof_bytes=kept)
        crashed = _restart_and_read(server, ["before", "after", "later"])
    finally:
        server.stop()

    assert killed == [b"1", b"2"]
    assert cut > 0
    assert crashed == [b"1", b"2", None]


def test_a_crash_cut_inside_a_command_still_restarts_without_it() -> None:
    """aof-load-truncated: a file cut mid-command loads up to the last whole one."""
    server = EmbeddedRedis(appendonly=True).start()
    try:
        client = redis.Redis.from_url(server.url)
        size = server.aof_size()
        client.set("whole", "1")
        kept = _written(server, size)
        client.set("torn", "x" * 1000)
        _written(server, kept)
        client.close()
        cut = server.crash(keep_aof_bytes=kept + 20)
        after = _restart_and_read(server, ["whole", "torn"])
    finally:
        server.stop()

    assert cut > 1000
    assert after == [b"1", None]


def test_a_negative_size_is_refused_before_killing() -> None:
    server = EmbeddedRedis(appendonly=True).start()
    try:
        with pytest.raises(ConfigurationError):
            server.crash(keep_aof_bytes=-1)
        assert server.running
    finally:
        server.stop()
