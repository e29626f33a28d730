"""Which codec decodes an interchange, from the syntax identifier in its UNB.

UNOA and UNOB only allow ASCII-range characters, but real senders put Latin-1 bytes in
them (the corpus has an ``Ö`` under UNOB). Decoding those as ISO-8859-1, with an
informational finding, keeps the text; refusing them would lose a whole manifest for
one umlaut in a consignee name.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["UNDECLARED", "Charset", "charset_for"]


@dataclass(frozen=True, slots=True)
class Charset:
    """How to decode one interchange.

    Args:
        codec: Python codec name.
        ascii_only: the identifier only allows ASCII-range characters; other bytes are
            still decoded (as ISO-8859-1) but reported.
        declared: whether a UNB declared it; undeclared input (bare UNH..UNT, or text
            before the first UNB) is tried as UTF-8 and falls back to ISO-8859-1.
    """

    codec: str
    ascii_only: bool = False
    declared: bool = True


#: What applies before any UNB and to bare UNH..UNT messages.
UNDECLARED = Charset("utf-8", declared=False)

_LATIN1 = "latin-1"

_BY_IDENTIFIER = MappingProxyType(
    {
        "UNOA": Charset(_LATIN1, ascii_only=True),
        "UNOB": Charset(_LATIN1, ascii_only=True),
        "UNOC": Charset(_LATIN1),
        "UNOD": Charset("iso8859-2"),
        "UNOE": Charset("iso8859-5"),
        "UNOF": Charset("iso8859-7"),
        "UNOG": Charset("iso8859-3"),
        "UNOH": Charset("iso8859-4"),
        "UNOI": Charset("iso8859-6"),
        "UNOJ": Charset("iso8859-8"),
        "UNOK": Charset("iso8859-9"),
        "UNOL": Charset("iso8859-15"),
        "UNOW": Charset("utf-8"),
        "UNOY": Charset("utf-8"),
        # IATA's identifiers name the same 7-bit repertoire as UNOA.
        "IATA": Charset(_LATIN1, ascii_only=True),
        "IATB": Charset(_LATIN1, ascii_only=True),
    }
)


def charset_for(syntax_identifier: str) -> Charset | None:
    """The charset of a UNB syntax identifier (``"UNOC"``), or ``None`` if unknown."""
    return _BY_IDENTIFIER.get(syntax_identifier.strip().upper())
