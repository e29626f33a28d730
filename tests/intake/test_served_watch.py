"""``tidegate intake serve --watch``: the drop folder in the real process, killed and restarted."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_a_dropped_file_is_acknowledged_in_done_by_the_served_watcher(
    own_redis: str, intake_server, build, tmp_path: Path, until
) -> None:
    """A file renamed into ACME's folder ends in done/ with its CONTRL; the unit is on
    the broker."""
    root = tmp_path / "drop"
    (root / "ACME").mkdir(parents=True)
    intake_server(own_redis, "--watch", str(root), "--watch-poll", "0.1")
    part = root / "ACME" / "m1.edi.part"
    part.write_bytes(build.interchange(build.vermas()))
    part.rename(root / "ACME" / "m1.edi")
    done = root / "ACME" / "done" / "m1.edi"
    until(done.exists, 30, "the file moved to done/")
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+8'" in (root / "ACME" / "done" / "m1.edi.contrl").read_text()
    assert redis.Redis.from_url(own_redis).llen("edi.customs") == 1


def test_killed_between_publish_and_move_the_file_stays_and_its_reread_is_a_duplicate(
    own_redis: str, intake_server, build, tmp_path: Path, until
) -> None:
    """SIGKILL after the interchange is recorded, before the CONTRL and the move: the
    file is still in ACME's folder; the restarted service reads it again, finds it a
    duplicate (code 26) and moves it to rejected/; the broker holds the unit once."""
    root = tmp_path / "drop"
    (root / "ACME").mkdir(parents=True)
    path = root / "ACME" / "m1.edi"
    path.write_bytes(build.interchange(build.vermas()))
    crashing = intake_server(
        own_redis,
        "--watch",
        str(root),
        "--watch-poll",
        "0.1",
        env={"TIDEGATE_INTAKE_FAULT": "before_ack"},
        ready=False,
    )
    assert crashing.process.wait(timeout=60) == -signal.SIGKILL
    assert path.exists()
    client = redis.Redis.from_url(own_redis)
    assert client.llen("edi.customs") == 1

    intake_server(own_redis, "--watch", str(root), "--watch-poll", "0.1")
    rejected = root / "ACME" / "rejected"
    until((rejected / "m1.edi.json").exists, 30, "the re-read file moved to rejected/")
    until(lambda: not path.exists(), 30, "the file left the sender's folder")
    assert json.loads((rejected / "m1.edi.json").read_text())["status"] == "duplicate"
    assert "+4+26'" in (rejected / "m1.edi.contrl").read_text()
    assert client.llen("edi.customs") == 1
    assert not (root / "ACME" / "done").exists()
