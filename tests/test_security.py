"""Security posture: AUTH/ACL and TLS Redis URLs work, secrets never appear, JSON only."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from kombu.exceptions import ContentDisallowed
from kombu.serialization import dumps, loads, prepare_accept_content

from tidegate._redis import client_from_url
from tidegate.cli import cli
from tidegate.errors import BackendError
from tidegate.flow import Gate
from tidegate.redis_server import EmbeddedRedis
from tidegate.settings import GatePolicy

pytestmark = pytest.mark.redis

PASSWORD = "tg-S3cret-pw"  # noqa: S105 - a throwaway test server's password


@pytest.fixture(scope="module")
def auth_server() -> Iterator[EmbeddedRedis]:
    """A Redis that requires a password, with an ACL user besides the default one."""
    server = EmbeddedRedis(password=PASSWORD).start()
    admin = redis.Redis.from_url(server.url)
    admin.execute_command("ACL", "SETUSER", "fleet", "on", f">{PASSWORD}-acl", "~*", "+@all")
    admin.close()
    try:
        yield server
    finally:
        server.stop()


def _gate_round_trip(url: str) -> bool:
    gate = Gate(client_from_url(url), "customs", policy=GatePolicy(rate=5, burst=2))
    return gate.try_acquire().allowed


def test_password_and_acl_user_urls_work(auth_server: EmbeddedRedis) -> None:
    """redis://:password@ (requirepass) and redis://user:password@ (ACL) both reach the gate."""
    assert _gate_round_trip(f"redis://:{PASSWORD}@127.0.0.1:{auth_server.port}/0")
    assert _gate_round_trip(f"redis://fleet:{PASSWORD}-acl@127.0.0.1:{auth_server.port}/1")


def test_wrong_password_is_a_typed_error_without_the_secret(auth_server: EmbeddedRedis) -> None:
    with pytest.raises(BackendError) as info:
        _gate_round_trip(f"redis://:wrong-{PASSWORD}@127.0.0.1:{auth_server.port}/0")
    assert PASSWORD not in str(info.value)


def test_cli_never_prints_the_password(auth_server: EmbeddedRedis) -> None:
    """Neither a working command, nor a failing one, nor --help shows the secret."""
    url = f"redis://:{PASSWORD}@127.0.0.1:{auth_server.port}/0"
    outputs = [
        CliRunner().invoke(cli, ["gate", "show", "customs"], env={"TIDEGATE_REDIS_URL": url}),
        CliRunner().invoke(
            cli,
            ["gate", "show", "customs"],
            env={"TIDEGATE_REDIS_URL": url.replace(PASSWORD, PASSWORD + "x")},
        ),
        CliRunner().invoke(cli, ["dlq", "ls", "--help"], env={"TIDEGATE_REDIS_URL": url}),
    ]
    assert outputs[0].exit_code == 0
    assert outputs[1].exit_code != 0
    for result in outputs:
        assert PASSWORD not in result.output


def _certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@contextlib.contextmanager
def tls_proxy(cert: Path, key: str | Path, upstream_port: int) -> Iterator[int]:
    """A TLS terminator in front of Redis (this redis-server build has no TLS of its own)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def serve() -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=context)
        ready.set()
        return server

    thread = threading.Thread(
        target=lambda: (loop.run_until_complete(serve()), loop.run_forever()), daemon=True
    )
    thread.start()
    ready.wait(10)
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a cert")
def test_rediss_url_works_through_tls(tmp_path: Path, redis_url: str) -> None:
    """rediss:// with a CA file: the gate's Lua round trip works over TLS."""
    cert, key = _certificate(tmp_path)
    upstream = int(redis_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    with tls_proxy(cert, key, upstream) as port:
        assert _gate_round_trip(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}")


def test_only_json_is_accepted() -> None:
    """A pickle payload is refused by the content whitelist the preset installs."""
    from celery import Celery

    from tidegate.integrations.celery import configure

    app = configure(Celery(broker="redis://127.0.0.1:1/0"))
    accepted = prepare_accept_content(app.conf.accept_content)
    content_type, encoding, body = dumps({"x": 1}, serializer="pickle")
    with pytest.raises(ContentDisallowed):
        loads(body, content_type, encoding, accept=accepted)
    content_type, encoding, body = dumps({"x": 1}, serializer="json")
    assert loads(body, content_type, encoding, accept=accepted) == {"x": 1}


#: A B/L number as carriers write them; the TOS forward uses it as the unit's key.
BL_NUMBER = "MAEU245118907"


def test_no_bl_number_reaches_a_log_line(redis_client: redis.Redis, prefix: str) -> None:
    """The log audit for business identifiers: a B/L-keyed unit refused by the TOS, then
    dead-lettered and replayed, writes JSON lines that name it only by its key's hash —
    and a ``bl_number``/``containers`` field passed by mistake is redacted."""
    import io
    import json

    from tidegate.downstream import DownstreamClient
    from tidegate.errors import DownstreamRejected
    from tidegate.load.dlq import DeadLetter, DeadLetterQueue
    from tidegate.load.replay import replay_dead_letters
    from tidegate.logging import configure, get_logger, key_hash
    from tidegate.sim import TosSim

    stream = io.StringIO()
    configure(stream=stream)
    with TosSim(max_connections=4, service_s=0.0) as tos:
        tos.reject_keys([BL_NUMBER])
        with (
            DownstreamClient("tos", tos.url) as client,
            pytest.raises(DownstreamRejected),
        ):
            client.send(tos.path, {"bl": "x"}, idempotency_key=BL_NUMBER)
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    dlq.add(
        DeadLetter(
            key=BL_NUMBER,
            task="edi.tos.forward_bl",
            reason="downstream rejected the document (HTTP 422)",
            bl_number=BL_NUMBER,
            batch_id="batch-1",
        )
    )
    replay_dead_letters(dlq, lambda letter: None, limit=10)
    get_logger("tidegate.test").warning(
        "careless_event", bl_number=BL_NUMBER, containers=["MSKU9070323"]
    )

    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    events = {line["event"]: line for line in lines}
    assert {"downstream_rejected", "bl_dead_lettered", "dlq_item_replayed"} <= set(events)
    for name in ("downstream_rejected", "bl_dead_lettered", "dlq_item_replayed"):
        assert events[name]["key_hash"] == key_hash(BL_NUMBER)
    assert events["careless_event"]["bl_number"] == "[redacted]"
    assert BL_NUMBER not in stream.getvalue()
    assert "MSKU9070323" not in stream.getvalue()
