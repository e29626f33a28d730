"""The vessel-arrival burst: realistic EDIFACT interchanges, built by tidegate itself.

When a vessel berths, the port community system receives in minutes what the call
produced: VERMAS declarations (verified gross mass, SOLAS VI/2) and CUSCAR cargo
reports for customs, COARRI discharge/load reports and CODECO gate moves for the
terminal. :func:`vessel_burst` writes one interchange per document — UNB/UNH
envelopes, ISO 6346 container numbers with correct check digits, UN/LOCODEs, B/L and
booking references — and runs each through the real intake
(:class:`tidegate.edi.Intake`) to classify and route it, as production would.

The text is synthetic: no real party, vessel or person appears in it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tidegate.edi.intake import Intake
from tidegate.edi.synthetic import synthetic_container

__all__ = ["DEFAULT_MIX", "Document", "vessel_burst"]

#: Share of each message type in a berthing burst (customs-bound ≈ 30 %).
DEFAULT_MIX: dict[str, float] = {"VERMAS": 0.25, "CUSCAR": 0.05, "COARRI": 0.40, "CODECO": 0.30}

_PORTS = ("NLRTM", "DEHAM", "BEANR", "ESALG", "SGSIN", "CNSHA", "USLAX", "GBFXT")
_CARRIERS = ("MSCU", "MAEU", "CMAU", "HLCU", "ONEY", "EGLV")
_SHIPPERS = ("NORDIC TIMBER AS", "RIO GRANDE COFFEE", "HANSA MACHINES GMBH", "DELTA FOODS BV")


@dataclass(frozen=True, slots=True)
class Document:
    """One interchange of the burst, classified and keyed.

    Attributes:
        key: the idempotency key: sha256 over sender, interchange and message
            references — the same document re-sent gets the same key.
        message_type: UNH type (VERMAS, COARRI…).
        document_class: the intake's class name.
        queue: the queue the intake routes it to.
        sheddable: whether overload may quarantine it.
        text: the EDIFACT interchange (never logged).
    """

    key: str
    message_type: str
    document_class: str
    queue: str
    sheddable: bool
    text: str

    def envelope(self) -> dict[str, object]:
        """The JSON message a task receives."""
        return {
            "key": self.key,
            "type": self.message_type,
            "class": self.document_class,
            "body": self.text,
        }


def _stamp(at: datetime) -> str:
    return at.strftime("%Y%m%d%H%M")


def _body(kind: str, rng: random.Random, ref: str, at: datetime) -> list[str]:
    container = synthetic_container(rng)
    carrier = rng.choice(_CARRIERS)
    bl = f"{carrier}{rng.randrange(10**8, 10**9)}"
    booking = f"BK{rng.randrange(10**7, 10**8)}"
    port = rng.choice(_PORTS)
    if kind == "VERMAS":
        return [
            f"UNH+{ref}+VERMAS:D:16A:UN:SMDG10",
            f"BGM+749+VGM{ref}+9",
            f"DTM+137:{_stamp(at)}:203",
            f"RFF+BN:{booking}",
            f"NAD+TB+{carrier}:160:ZZZ",
            f"EQD+CN+{container}+45G1:6346:5+++5",
            f"RFF+BN:{booking}",
            f"MEA+AAE+VGM+KGM:{rng.randrange(4000, 30480)}",
            f"DTM+798:{_stamp(at - timedelta(hours=3))}:203",
            f"DOC+SM1:VGM:306+W{ref}",
            f"NAD+SPC+++{rng.choice(_SHIPPERS)}",
        ]
    if kind == "CUSCAR":
        return [
            f"UNH+{ref}+CUSCAR:D:95B:UN",
            f"BGM+85+CR{ref}+9",
            f"DTM+132:{_stamp(at)}:203",
            f"TDT+20+V{rng.randrange(100, 999)}E+1++{carrier}:172:20",
            f"LOC+5+{port}:139:6",
            "CNI+1",
            f"RFF+BM:{bl}",
            f"NAD+CZ+++{rng.choice(_SHIPPERS)}",
            f"GID+1+{rng.randrange(1, 900)}:PK",
            f"EQD+CN+{container}",
        ]
    if kind == "COARRI":
        event = rng.choice(("44", "46"))  # discharge / loading report
        return [
            f"UNH+{ref}+COARRI:D:95B:UN:ITG13",
            f"BGM+{event}+CR{ref}+9",
            f"TDT+20+V{rng.randrange(100, 999)}E+1++{carrier}:172:20",
            f"LOC+11+{port}:139:6",
            f"NAD+CF+{carrier}:160:166",
            f"EQD+CN+{container}+45G1:102:5++2+5",
            f"RFF+BM:{bl}",
            f"DTM+203:{_stamp(at)}:203",
            f"LOC+147+0{rng.randrange(100000, 999999)}:9:5",
            "CNT+16:1",
        ]
    event = rng.choice(("34", "36"))  # gate-out / gate-in
    return [
        f"UNH+{ref}+CODECO:D:95B:UN:ITG14",
        f"BGM+{event}+GM{ref}+9",
        f"NAD+MS+{carrier}:160:166",
        f"EQD+CN+{container}+22G1:102:5+2+3",
        f"RFF+BN:{booking}",
        f"DTM+7:{_stamp(at)}:203",
        f"TDT+1++3++{carrier}:172:20",
        "CNT+16:1",
    ]


def _interchange(kind: str, rng: random.Random, index: int, at: datetime) -> tuple[str, str]:
    sender = "PORTCOMMSYS"
    icref = f"{index:09d}"
    ref = f"M{index:08d}"
    body = _body(kind, rng, ref, at)
    body.append(f"UNT+{len(body) + 1}+{ref}")
    segments = [
        f"UNB+UNOC:3+{sender}+TIDEGATE+{at:%y%m%d}:{at:%H%M}+{icref}",
        *body,
        f"UNZ+1+{icref}",
    ]
    key = hashlib.sha256(f"{sender}\x1f{icref}\x1f{ref}".encode()).hexdigest()
    return key, "'".join(segments) + "'"


def vessel_burst(
    count: int, *, seed: int = 7, mix: dict[str, float] | None = None
) -> Iterator[Document]:
    """Yield ``count`` documents of one berthing, classified by the real intake.

    Args:
        count: interchanges to generate.
        seed: the same seed gives the same burst (and the same idempotency keys).
        mix: message type → share; :data:`DEFAULT_MIX` when omitted.
    """
    rng = random.Random(seed)
    shares = mix or DEFAULT_MIX
    kinds, weights = list(shares), list(shares.values())
    at = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    for index in range(1, count + 1):
        kind = rng.choices(kinds, weights)[0]
        key, text = _interchange(kind, rng, index, at + timedelta(seconds=index))
        (result,) = list(Intake(text.encode("latin-1")))
        cls = result.classification.document_class
        yield Document(key, kind, cls.name, cls.queue, cls.sheddable, text)
