"""The served intake under hostile input: a 1 GB upload, concurrent copies of one interchange."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]

GIB = 1 << 30
CHUNK = 1 << 20
LIMIT = 8 * CHUNK


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Upload:
    """1 GiB of body, produced a chunk at a time (never held by the client either)."""

    def __init__(self) -> None:
        self.sent = 0
        self.chunk = b"UNH+1+VERMAS:D:16A:UN'" + b"X" * (CHUNK - 22)

    def __iter__(self) -> Iterator[bytes]:
        while self.sent < GIB:
            self.sent += len(self.chunk)
            yield self.chunk


@pytest.mark.parametrize("announce", [False, True], ids=["chunked", "content-length"])
def test_a_1_gb_upload_is_413_before_it_is_sent_and_the_server_does_not_hold_it(
    own_redis: str, intake_server, announce: bool
) -> None:
    """Streamed to the real process: the answer is 413 while the client has sent a
    small part of the gigabyte (the server stopped reading near its 8 MiB limit), and
    the server's resident memory grew by far less than the upload."""
    served = intake_server(own_redis, "--max-body-bytes", str(LIMIT))
    before = _rss_bytes(served.process.pid)
    upload = Upload()
    headers = {"content-length": str(GIB)} if announce else {}
    with httpx.Client(timeout=60) as client:
        response = client.post(f"{served.url}/interchanges", content=upload, headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert upload.sent < GIB // 8
    assert _rss_bytes(served.process.pid) - before < 4 * LIMIT
    assert served.process.poll() is None


def test_concurrent_posts_of_one_interchange_over_http_publish_once(
    own_redis: str, intake_server, build
) -> None:
    """Eight senders' threads post the same interchange at once to the real process:
    one 202; the others 409 (after) or 503 in flight (during); one unit on the broker."""
    served = intake_server(own_redis)
    body = build.interchange(build.vermas())
    barrier = threading.Barrier(8)
    statuses: list[int] = []
    lock = threading.Lock()

    def post() -> None:
        with httpx.Client(timeout=30) as client:
            barrier.wait()
            status = client.post(f"{served.url}/interchanges", content=body).status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = Counter(statuses)
    assert counts[202] == 1
    assert counts[409] + counts[503] == 7
    assert redis.Redis.from_url(own_redis).llen("edi.customs") == 1
