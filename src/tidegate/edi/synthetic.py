"""Synthetic EDIFACT for benchmarks, demos and tests: manifests and small builders.

The real samples in the shared corpus may not be copied into the project (several are
GPL or unlicensed), and none is large, so the project generates its own manifests:
deterministic for a given seed, with valid ISO 6346 containers, a mix of B/L sources
(``RFF+BM``, ``RFF+BN`` only, none) and optional messiness (CRLF between segments, a
custom UNA, release characters). Never used on the intake path.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tidegate.edi.syntax import DEFAULT_DELIMITERS, Delimiters, escape
from tidegate.edi.validate import iso6346_check_digit

__all__ = [
    "interchange_segments",
    "iter_synthetic_interchanges",
    "message_segments",
    "render",
    "synthetic_container",
    "synthetic_ifcsum",
]

_OWNERS = ("MSC", "MAE", "CMA", "HLX", "ONE", "EGH", "COS", "TGH")
_GOODS = ("MACHINERY PARTS", "FROZEN FISH", "TEXTILES", "COFFEE BEANS", "AUTO PARTS")
_PORTS = ("NLRTM", "DEHAM", "BEANR", "SGSIN", "CNSHA", "USNYC")


def synthetic_container(rng: random.Random) -> str:
    """A random container number with a correct ISO 6346 check digit."""
    prefix = f"{rng.choice(_OWNERS)}U{rng.randrange(1_000_000):06d}"
    return f"{prefix}{iso6346_check_digit(prefix)}"


def _consignment(
    rng: random.Random, position: int, *, bl_mode: str, release: bool
) -> list[list[list[str]]]:
    goods = rng.choice(_GOODS)
    if release:
        goods += " 20'GP: ONE+ONLY?"
    segments = [
        [["CNI"], [str(position)], [f"CN{position:08d}"]],
        [["DTM"], ["137", "202401150000", "203"]],
        [["CNT"], ["7", str(rng.randrange(100, 30000)), "KGM"]],
        [["CNT"], ["11", str(rng.randrange(1, 40)), "NMB"]],
    ]
    if bl_mode == "BM":
        segments.append([["RFF"], ["BM", f"{rng.choice(_OWNERS)}U{position:09d}"]])
    if bl_mode in ("BM", "BN"):
        segments.append([["RFF"], ["BN", f"BK{position:010d}"]])
    segments += [
        [["TSR"], [""], [""], [""], ["GEN"]],
        [["LOC"], ["9"], [rng.choice(_PORTS), "139", "6"]],
        [["LOC"], ["11"], [rng.choice(_PORTS), "139", "6"]],
        [["NAD"], ["CZ"], [""], [""], [f"SHIPPER {position}"], ["1 HARBOUR ROAD"], ["ROTTERDAM"]],
        [["NAD"], ["CN"], [""], [""], [f"CONSIGNEE {position}"], ["2 DOCK STREET"], ["HAMBURG"]],
        [["GID"], ["1"], [str(rng.randrange(1, 500)), "CT"]],
        [["FTX"], ["AAA"], [""], [""], [goods]],
        [["MEA"], ["WT"], ["AAD"], ["KGM", str(rng.randrange(100, 30000))]],
        [["EQD"], ["CN"], [synthetic_container(rng)], ["45G1", "102", "5"]],
        [["SEL"], [str(rng.randrange(10**6, 10**7))], ["CA"]],
    ]
    return segments


def _render(segment: list[list[str]], delimiters: Delimiters) -> str:
    return delimiters.element.join(
        delimiters.component.join(escape(c, delimiters) for c in element) for element in segment
    )


def iter_synthetic_interchanges(
    consignments: int,
    *,
    interchanges: int = 1,
    seed: int = 0,
    sender: str = "TIDEGATESIM",
    delimiters: Delimiters = DEFAULT_DELIMITERS,
    una: bool = False,
    newline: str = "",
    bl_every: tuple[str, ...] = ("BM", "BM", "BM", "BM", "BM", "BM", "BM", "BM", "BN", "-"),
    release_every: int = 50,
) -> Iterator[bytes]:
    """Yield ``interchanges`` IFCSUM interchanges, one message each, as UTF-8 chunks.

    Args:
        consignments: CNI groups per message.
        interchanges: how many interchanges to concatenate.
        seed: makes the output reproducible.
        sender: UNB sender identification.
        delimiters: separators to write with (a UNA is then always written).
        una: write a UNA even with the default separators.
        newline: written after every terminator (``"\\r\\n"`` for CRLF files).
        bl_every: cycled per consignment: ``"BM"`` writes RFF+BM and RFF+BN,
            ``"BN"`` only RFF+BN, anything else no RFF at all.
        release_every: every n-th consignment's FTX needs release characters.
    """
    rng = random.Random(seed)
    term = delimiters.terminator + newline
    for number in range(1, interchanges + 1):
        control = f"{seed:04d}{number:06d}"
        head = ""
        if una or delimiters != DEFAULT_DELIMITERS:
            head = delimiters.una + newline
        header = [
            [
                ["UNB"],
                ["UNOC", "3"],
                [sender, "ZZZ"],
                ["TIDEGATE", "ZZZ"],
                ["240115", "1200"],
                [control],
            ],
            [["UNH"], ["M1"], ["IFCSUM", "D", "96A", "UN"]],
            [["BGM"], ["785"], [f"MF{control}"], ["9"]],
            [["DTM"], ["137", "202401151200", "203"]],
            [["TDT"], ["20"], ["V123"], ["1"], [""], ["MSC", "172", "20"]],
        ]
        yield (head + "".join(_render(s, delimiters) + term for s in header)).encode()
        count = len(header) - 1
        batch: list[str] = []
        for position in range(1, consignments + 1):
            mode = bl_every[(position - 1) % len(bl_every)] if bl_every else "BM"
            release = release_every > 0 and position % release_every == 0
            segments = _consignment(rng, position, bl_mode=mode, release=release)
            count += len(segments)
            batch.extend(_render(s, delimiters) + term for s in segments)
            if len(batch) >= 2000:
                yield "".join(batch).encode()
                batch = []
        trailer = [[["UNT"], [str(count + 1)], ["M1"]], [["UNZ"], ["1"], [control]]]
        batch.extend(_render(s, delimiters) + term for s in trailer)
        yield "".join(batch).encode()


def synthetic_ifcsum(consignments: int, **options: object) -> bytes:
    """:func:`iter_synthetic_interchanges` joined into one bytes object."""
    return b"".join(iter_synthetic_interchanges(consignments, **options))  # type: ignore[arg-type]


def message_segments(
    reference: str,
    identifier: str,
    *body: str,
    unt_count: int | None = None,
    unt_reference: str | None = None,
) -> list[str]:
    """UNH, ``body`` and a UNT, as segment texts with the default separators.

    The UNT count is right unless ``unt_count`` is given (to build a wrong one).

    Example:
        >>> message_segments("1", "IFTSTA:D:00B:UN", "BGM+23")
        ['UNH+1+IFTSTA:D:00B:UN', 'BGM+23', 'UNT+3+1']
    """
    segments = [f"UNH+{reference}+{identifier}", *body]
    count = len(segments) + 1 if unt_count is None else unt_count
    segments.append(f"UNT+{count}+{reference if unt_reference is None else unt_reference}")
    return segments


def interchange_segments(
    *messages: list[str],
    reference: str = "IC1",
    sender: str = "SENDER",
    syntax: str = "UNOC:3",
    unz_count: int | None = None,
    unz_reference: str | None = None,
) -> list[str]:
    """UNB, the messages' segments and a UNZ (right count unless ``unz_count``)."""
    segments = [f"UNB+{syntax}+{sender}+RECEIVER+240115:1200+{reference}"]
    for message in messages:
        segments.extend(message)
    count = len(messages) if unz_count is None else unz_count
    segments.append(f"UNZ+{count}+{reference if unz_reference is None else unz_reference}")
    return segments


def render(
    segments: list[str], *, terminator: str = "'", newline: str = "", encoding: str = "utf-8"
) -> bytes:
    """Segment texts joined with ``terminator`` (and ``newline`` after each)."""
    return "".join(f"{segment}{terminator}{newline}" for segment in segments).encode(encoding)
