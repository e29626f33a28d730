"""The one keyspace: its layout is pinned, each store's keys share one Cluster slot, and
the stores write no key the keyspace does not build.

The literal strings below are the layout data in a running Redis is stored under: a
change here is a migration, not a refactor.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

import tidegate
from tidegate.bulk.store import BatchStore
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.intake.redis_duplicates import RedisDuplicates
from tidegate.keys import DEFAULT_PREFIX, LIMIT_KINDS, GateKeys, Keyspace
from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.load.ledger import DeliveryLedger
from tidegate.load.outstanding import Outstanding, OutstandingUnit
from tidegate.load.parking import ParkingLot
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import WatermarkStore
from tidegate.settings import Settings

KS = Keyspace("tg")


def test_the_default_prefix_is_defined_once_and_used_by_settings() -> None:
    """The settings' default prefix is the keyspace's."""
    assert DEFAULT_PREFIX == "tidegate"
    assert Settings.model_fields["prefix"].default == DEFAULT_PREFIX
    assert Keyspace().prefix == DEFAULT_PREFIX


def test_every_family_layout_is_pinned() -> None:
    """Every family's keys for prefix ``tg``, spelled out (the stored layout)."""
    gate = KS.limit("customs")
    assert (gate.tat, gate.leases, gate.pause, gate.config, gate.released, gate.admitted) == (
        "tg:gate:{customs}:tat",
        "tg:gate:{customs}:leases",
        "tg:gate:{customs}:pause",
        "tg:gate:{customs}:config",
        "tg:gate:{customs}:released",
        "tg:gate:{customs}:admitted",
    )
    assert KS.limit("x", kind="rate").tat == "tg:rate:{x}:tat"
    assert KS.limit("x", kind="sem").leases == "tg:sem:{x}:leases"
    assert KS.limit_head() == "tg:gate:{"
    assert KS.limits_pattern() == "tg:gate:{*"
    assert Keyspace("a*b").limits_pattern(kind="sem") == "a\\*b:sem:{*"
    adaptive = KS.adaptive("tos")
    assert (
        adaptive.lease,
        adaptive.state,
        adaptive.history,
        adaptive.policy,
        adaptive.obs,
        adaptive.wake,
    ) == (
        "tg:adaptive:{tos}:lease",
        "tg:adaptive:{tos}:state",
        "tg:adaptive:{tos}:history",
        "tg:adaptive:{tos}:policy",
        "tg:adaptive:{tos}:obs",
        "tg:adaptive:{tos}:wake",
    )
    assert KS.adaptive_states() == "tg:adaptive:{*}:state"
    assert KS.delivered("tos", "K-1") == "tg:delivered:{tos}:K-1"
    assert KS.delivered_all() == "tg:delivered:*"
    assert KS.ledger_epoch("tos") == "tg:ledger-epoch:{tos}"
    batch = KS.batch("b1")
    assert [getattr(batch, f) for f in batch.__slots__] == [
        f"tg:batch:{{b1}}:{part}"
        for part in (
            "units",
            "order",
            "expected",
            "done",
            "fired",
            "outcomes",
            "forwarded",
            "document",
            "dispatched",
            "summary",
        )
    ]
    parking = KS.parking()
    assert (parking.due, parking.env, parking.inflight) == (
        "tg:{parking}:due",
        "tg:{parking}:env",
        "tg:{parking}:inflight",
    )
    dlq = KS.dlq()
    assert (dlq.records, dlq.order, dlq.stats, dlq.replaying, dlq.replays) == (
        "tg:{dlq}:records",
        "tg:{dlq}:order",
        "tg:{dlq}:stats",
        "tg:{dlq}:replaying",
        "tg:{dlq}:replays",
    )
    q = KS.quarantine()
    assert (q.records, q.since, q.queues, q.stats) == (
        "tg:{quarantine}:records",
        "tg:{quarantine}:since",
        "tg:{quarantine}:queues",
        "tg:{quarantine}:stats",
    )
    assert q.waiting("bulk.documents") == "tg:{quarantine}:waiting:bulk.documents"
    assert q.inflight("bulk.documents") == "tg:{quarantine}:inflight:bulk.documents"
    out = KS.outstanding()
    assert out.base == "tg:{outstanding}"
    assert [getattr(out, f) for f in out.__slots__ if f != "base"] == [
        f"tg:{{outstanding}}:{part}"
        for part in (
            "units",
            "misses",
            "sweep-lock",
            "workers",
            "armed",
            "present",
            "queues",
            "seq",
            "seen",
            "indexed",
        )
    ]
    assert out.published("q\x06\x163") == "tg:{outstanding}:published:q\x06\x163"
    assert out.pushed("q") == "tg:{outstanding}:pushed:q"
    assert KS.watermarks() == "tg:{load}:watermarks"
    assert KS.load_board() == "tg:{load}:board"
    assert KS.monitor_lease() == "tg:{load}:monitor"
    assert KS.console_history() == "tg:{console}:history"
    assert KS.console_turn() == "tg:{console}:history:turn"
    assert KS.metrics_events() == "tg:{metrics}:events"
    assert KS.metrics_write_probe() == "tg:{metrics}:write_probe"
    assert KS.demo_write_probe() == "tg:demo:write-probe"
    assert KS.interchange("ACME", "REF1") == (
        "tg:intake:interchange:8c497022a857adb1c4b3d4458f56442acddf5f4a11f10207bf08e6f598fa59db"
    )
    assert KS.everything() == "tg:*"


def test_a_limit_key_names_its_limit() -> None:
    """The gate listing reads names back from keys; other families and prefixes are not
    gates."""
    assert KS.limit_name(KS.limit("tos.north").pause) == "tos.north"
    assert KS.limit_name(KS.limit("x", kind="rate").tat) is None
    assert KS.limit_name(KS.limit("x", kind="rate").tat, kind="rate") == "x"
    assert KS.limit_name(Keyspace("tgx").limit("x").tat) is None
    assert KS.limit_name("tg:gate:{no-suffix") is None


def test_the_interchange_digest_is_length_prefixed() -> None:
    """Sender and reference are hashed with their lengths, so moving a character from
    one to the other gives another key."""
    assert KS.interchange("AB", "C") != KS.interchange("A", "BC")
    assert KS.interchange("A", "BC").startswith("tg:intake:interchange:")


def _slots(keys: list[str]) -> set[int]:
    return {key_slot(k.encode()) for k in keys}


@pytest.mark.parametrize("prefix", ["tg", "tidegate", "a:b.c-d_e"])
def test_the_keys_of_one_store_or_limit_share_one_slot(prefix: str) -> None:
    """Every key a multi-key script may take together hashes to one Cluster slot."""
    ks = Keyspace(prefix)
    for kind in LIMIT_KINDS:
        limit = ks.limit("customs", kind=kind)
        assert len(_slots([getattr(limit, f) for f in GateKeys.__slots__])) == 1
    adaptive = ks.adaptive("tos")
    assert len(_slots([adaptive.lease, adaptive.state, adaptive.history])) == 1
    assert len(_slots([adaptive.policy, adaptive.obs, adaptive.wake, adaptive.lease])) == 1
    assert (
        len(_slots([ks.delivered("tos", f"K-{i}") for i in range(50)] + [ks.ledger_epoch("tos")]))
        == 1
    )
    batch = ks.batch("b-42")
    assert len(_slots([getattr(batch, f) for f in batch.__slots__])) == 1
    parking, dlq, q, out = ks.parking(), ks.dlq(), ks.quarantine(), ks.outstanding()
    assert len(_slots([getattr(parking, f) for f in parking.__slots__])) == 1
    assert len(_slots([getattr(dlq, f) for f in dlq.__slots__])) == 1
    assert (
        len(_slots([getattr(q, f) for f in q.__slots__] + [q.waiting("a"), q.inflight("b")])) == 1
    )
    lanes = [out.published("a"), out.pushed("a"), out.published("b\x06\x169")]
    assert len(_slots([getattr(out, f) for f in out.__slots__] + lanes)) == 1
    assert len(_slots([ks.watermarks(), ks.load_board(), ks.monitor_lease()])) == 1
    assert len(_slots([ks.console_history(), ks.console_turn()])) == 1
    assert len(_slots([ks.metrics_events(), ks.metrics_write_probe()])) == 1


def test_names_do_not_move_the_tag() -> None:
    """Two names give two slots (the name is the tag, not the prefix), and a name with
    a brace, which would move the tag, is refused for an adaptive controller."""
    assert _slots([KS.limit("customs").tat]) != _slots([KS.limit("tos").tat])
    for bad in ("", "a{b", "b}", " tos"):
        with pytest.raises(ConfigurationError):
            KS.adaptive(bad)


def test_the_old_builders_give_the_keyspace_keys() -> None:
    """``GateKeys.build`` and ``AdaptiveKeys.build``, kept for callers not yet moved,
    are the keyspace's keys."""
    from tidegate.flow.adaptive import AdaptiveKeys

    assert GateKeys.build("c", kind="rate", prefix="tg") == KS.limit("c", kind="rate")
    assert AdaptiveKeys.build("c", prefix="tg") == KS.adaptive("c")


@pytest.mark.redis
def test_the_stores_write_only_keys_the_keyspace_builds(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Drive each store once on a real Redis: every key found under the prefix is one
    the keyspace names, and every store wrote at least one."""
    ks = Keyspace(prefix)
    lot = ParkingLot(redis_client, prefix=prefix)
    lot.park({"task": "t", "args": []}, delay_s=0.0, reason="r")
    assert lot.claim_due(10)
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    dlq.add(DeadLetter(key="K-1", task="t", reason="r", first_failed_at=time.time()))
    dlq.begin_replay("K-1")
    quarantine = Quarantine(redis_client, prefix=prefix)
    quarantine.add(QuarantinedDocument("Q-1", "BULK_BL_PDF", "bulk.documents", "bulk.store", {}))
    assert quarantine.claim("bulk.documents", 1)
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    ledger.sending("tos", "K-2")
    ledger.entry("tos", "K-2")
    outstanding = Outstanding(redis_client, prefix=prefix)
    s0 = outstanding.record(OutstandingUnit("K-3", "t", "id-3", "edi.tos", [], {}))
    outstanding.pushed("K-3", "edi.tos", s0)
    outstanding.beat("w1", dead_after_s=60, arm_sweeps=1)
    WatermarkStore(redis_client, prefix=prefix).configure(hwm=100, lwm=10)
    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.acquire(max_wait=1.0).release()
    gate.pause(5.0, "test")
    batches = BatchStore(redis_client, prefix=prefix)
    batches.save_units("b1", [{"key": "U-1"}])
    batches.seal("b1", 1)
    batches.mark_dispatched("b1")
    RedisDuplicates(redis_client, prefix=prefix).claim("ACME", "REF1", "t1")

    found = {k.decode() for k in redis_client.scan_iter(match=ks.everything(), count=1000)}
    families = {
        "parking": {getattr(ks.parking(), f) for f in ks.parking().__slots__},
        "dlq": {getattr(ks.dlq(), f) for f in ks.dlq().__slots__},
        "quarantine": {getattr(ks.quarantine(), f) for f in ks.quarantine().__slots__}
        | {ks.quarantine().waiting("bulk.documents"), ks.quarantine().inflight("bulk.documents")},
        "ledger": {ks.delivered("tos", "K-2"), ks.ledger_epoch("tos")},
        "outstanding": {getattr(ks.outstanding(), f) for f in ks.outstanding().__slots__}
        | {ks.outstanding().published("edi.tos"), ks.outstanding().pushed("edi.tos")},
        "load": {ks.watermarks()},
        "gate": {getattr(ks.limit("customs"), f) for f in GateKeys.__slots__},
        "batch": {getattr(ks.batch("b1"), f) for f in ks.batch("b1").__slots__},
        "intake": {ks.interchange("ACME", "REF1")},
    }
    assert found <= set().union(*families.values()), found - set().union(*families.values())
    assert {name for name, keys in families.items() if keys & found} == set(families)


def test_no_module_but_the_keyspace_formats_a_tidegate_key() -> None:
    """The line held: a key built anywhere else (``f"{prefix}:..."``) would be a second
    layout for someone to keep in step, and the hash-tag rule written twice."""
    root = Path(tidegate.__file__).parent
    # A key formatted from a prefix, or written out under the default one.
    formatted = re.compile(r"""f["'][^"']*\{[a-z_.]*prefix\}:|["']tidegate:[A-Za-z{]""")
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "keys.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if formatted.search(line)
    ]
    assert offenders == []
