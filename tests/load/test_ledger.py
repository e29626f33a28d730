"""The delivery ledger's Redis-only edges: Redis ``TIME`` as the default clock, the
stored forms, restarts, errors. What every ledger promises (new → sending → delivered,
TTLs, the clock) is in ``tests/load/stores/test_ledger_behaviour.py``, on both stores."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import redis

from tidegate.errors import BackendUnavailable, ConfigurationError
from tidegate.keys import Keyspace
from tidegate.load import DeliveryLedger, DeliveryState

pytestmark = pytest.mark.redis


def test_an_unreachable_redis_is_a_typed_error() -> None:
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    with pytest.raises(BackendUnavailable):
        DeliveryLedger(client).state("tos", "K-5")


def test_sending_keeps_when_the_last_attempt_started(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The entry says when the call started, on the fleet clock, read with Redis TIME."""
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    assert ledger.sending("tos", "K-6", now_ms="1000000.5") == 1_000_000.5
    assert ledger.sending("tos", "K-6", now_ms="2000000") == 2_000_000.0  # a later attempt
    entry = ledger.entry("tos", "K-6")
    seconds, micros = redis_client.time()
    assert entry.state is DeliveryState.SENDING
    assert entry.sent_at_ms == 2_000_000.0
    assert abs(entry.now_ms - (seconds * 1000 + micros / 1000)) < 5_000


def test_sending_without_a_time_takes_redis_time_and_spares_delivered(
    redis_client: redis.Redis, prefix: str
) -> None:
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    sent = ledger.sending("tos", "K-7")
    entry = ledger.entry("tos", "K-7")
    assert sent is not None
    assert entry.sent_at_ms == sent <= entry.now_ms
    ledger.mark("tos", "K-7")
    assert ledger.sending("tos", "K-7") is None
    delivered = ledger.entry("tos", "K-7")
    assert (delivered.state, delivered.sent_at_ms) == (DeliveryState.DELIVERED, None)


def test_an_entry_written_before_send_times_were_kept_is_sending_without_one(
    redis_client: redis.Redis, prefix: str
) -> None:
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    redis_client.set(Keyspace(prefix).delivered("tos", "K-8"), b"s")
    entry = ledger.entry("tos", "K-8")
    assert (entry.state, entry.sent_at_ms) == (DeliveryState.SENDING, None)


def test_a_redis_restart_puts_the_ledger_in_doubt_for_doubt_s() -> None:
    """Killed and started again from its AOF: a missing record may be a lost one."""
    from tidegate.redis_server import EmbeddedRedis

    server = EmbeddedRedis(appendonly=True).start()
    try:
        client = redis.Redis.from_url(server.url)
        ledger = DeliveryLedger(client, prefix="t")
        calm = DeliveryLedger(client, prefix="t", doubt_s=0)
        first = ledger.entry("tos", "K-9")  # the first sight of a server is no restart
        again = ledger.entry("tos", "K-9")
        # everysec may hold a write back up to 2 s while an fsync runs, and the script's
        # own SCRIPT LOAD reaches the file first: wait for the epoch record itself.
        epoch = Keyspace("t").ledger_epoch("tos").encode()
        deadline = time.monotonic() + 10
        while epoch not in server.aof_path.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert epoch in server.aof_path.read_bytes(), "redis never wrote the epoch"
        server.kill()
        server.start()
        client.connection_pool.disconnect()
        after = ledger.entry("tos", "K-9"), ledger.entry("tos", "K-10")
        no_doubt = calm.entry("customs", "K-9")
    finally:
        server.stop()

    assert (first.in_doubt, again.in_doubt) == (False, False)
    assert [e.in_doubt for e in after] == [True, True]
    assert [e.state for e in after] == [DeliveryState.NEW, DeliveryState.NEW]
    assert no_doubt.in_doubt is False


def test_a_restart_that_lost_the_record_of_the_server_before_is_still_a_restart() -> None:
    """The epoch record is a write like any other: a crash within a second of its first
    write loses it with the delivered marks it should cast doubt on. Here the server
    comes back with nothing at all (no AOF): to the script alone it is a first sight,
    and a ledger that knew no server (a process started after the restart, first to
    read it) takes it for one. A ledger that read the server before knows better —
    for every downstream, including one it had not read yet — and from then on the
    newcomer reads that doubt too; a downstream nobody who knew read stays clear."""
    from tidegate.redis_server import EmbeddedRedis

    server = EmbeddedRedis(appendonly=False).start()
    try:
        client = redis.Redis.from_url(server.url)
        ledger = DeliveryLedger(client, prefix="t")
        first = ledger.entry("tos", "K-16")
        server.kill()
        server.start()
        client.connection_pool.disconnect()
        assert client.exists(Keyspace("t").ledger_epoch("tos")) == 0  # lost with the rest
        newcomer = DeliveryLedger(client, prefix="t")
        unaware = newcomer.entry("tos", "K-17")
        after = ledger.entry("tos", "K-16"), ledger.entry("customs", "K-16")
        told = newcomer.entry("tos", "K-17")
        untold = newcomer.entry("rail", "K-17")
    finally:
        server.stop()

    assert (first.in_doubt, unaware.in_doubt) == (False, False)
    assert [e.in_doubt for e in after] == [True, True]
    assert told.in_doubt is True
    assert untold.in_doubt is False


#: A forking worker's main process, alone in a fresh interpreter (forking the test
#: process itself, with pytest's and xdist's threads in it, is not fork-safe): one
#: command a line — ``witness``, ``fork`` (a child builds a ledger and reads one entry;
#: prints 1 if it is in doubt, else 0), ``fork-unwitnessed`` (the same, forked with
#: nothing witnessed).
PARENT = textwrap.dedent(
    """
    import os, sys
    import redis
    from tidegate.load import DeliveryLedger, ledger

    url = sys.argv[1]
    client = redis.Redis.from_url(url)

    def fork():
        pid = os.fork()
        if pid == 0:
            entry = DeliveryLedger(redis.Redis.from_url(url), prefix="t").entry("tos", "K-18")
            os._exit(1 if entry.in_doubt else 0)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    for line in sys.stdin:
        command = line.strip()
        if command == "witness":
            client.connection_pool.disconnect()
            ledger.witness_server(client)
            print("ok", flush=True)
        elif command == "fork":
            print(fork(), flush=True)
        elif command == "fork-unwitnessed":
            witnessed, ledger._WITNESSED = ledger._WITNESSED, {}
            print(fork(), flush=True)
            ledger._WITNESSED = witnessed
    """
)


def test_a_forked_child_starts_from_the_server_its_parent_witnessed() -> None:
    """RQ forks a fresh work horse for every job, so a horse's ledger knows of no
    server before the one it meets: after a restart that lost the record of the server
    before, it took the new one for a first sight. The worker witnesses the server
    before each fork (``witness_server``): a child of a parent that witnessed nothing,
    first to read the new server, is not in doubt; one forked from the witness is,
    before the parent read the new server and after."""
    from tidegate.redis_server import EmbeddedRedis

    server = EmbeddedRedis(appendonly=False).start()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, server.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdin is not None
    assert parent.stdout is not None
    stdin, stdout = parent.stdin, parent.stdout

    def ask(command: str) -> str:
        stdin.write(command + "\n")
        stdin.flush()
        return stdout.readline().strip()

    try:
        DeliveryLedger(redis.Redis.from_url(server.url), prefix="t").entry("tos", "K-18")
        assert ask("witness") == "ok"
        server.kill()
        server.start()  # without its files: the epoch record of the server before is gone
        without_a_witness = ask("fork-unwitnessed")  # the first to read the new server
        before_reading_the_new_one = ask("fork")
        assert ask("witness") == "ok"  # the next fork's witness reads the new server
        after_reading_it = ask("fork")
    finally:
        stdin.close()
        parent.wait(timeout=30)
        server.stop()

    assert without_a_witness == "0"
    assert (before_reading_the_new_one, after_reading_it) == ("1", "1")


def test_a_witness_of_an_unreachable_redis_is_a_typed_error() -> None:
    from tidegate.load.ledger import witness_server

    with pytest.raises(BackendUnavailable):
        witness_server(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2))


def test_a_negative_doubt_is_a_configuration_error(redis_client: redis.Redis) -> None:
    with pytest.raises(ConfigurationError, match="doubt_s"):
        DeliveryLedger(redis_client, doubt_s=-1)
