"""Segments and separators: the smallest units the tokenizer hands out.

A :class:`Segment` keeps the decoded text exactly as sent (release characters still in
place) and parses its elements only when asked. Most segments of a manifest are never
looked into (only CNI, RFF, EQD and the service segments are), so lazy parsing is what
keeps the intake an order of magnitude faster than a parser that builds every element.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidegate.edi.errors import InvalidServiceStringAdvice

__all__ = [
    "DEFAULT_DELIMITERS",
    "Delimiters",
    "Element",
    "Segment",
    "canonical_separators",
    "escape",
    "parse_una",
    "split_segment",
]

#: One data element: its components, at least one (possibly empty) string.
Element = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Delimiters:
    """The service characters of one interchange (ISO 9735 UNA).

    Args:
        component: component data element separator (``:``).
        element: data element separator (``+``).
        decimal: decimal mark (``.``); values are kept as text, so it is informative.
        release: release (escape) character (``?``), or ``None`` when the UNA gives a
            space, meaning no release character is in use.
        repetition: repetition separator (syntax 4) or reserved space; not split on.
        terminator: segment terminator (``'``).
    """

    component: str = ":"
    element: str = "+"
    decimal: str = "."
    release: str | None = "?"
    repetition: str = " "
    terminator: str = "'"

    @property
    def una(self) -> str:
        """The 9-character UNA segment declaring these delimiters."""
        release = " " if self.release is None else self.release
        return (
            f"UNA{self.component}{self.element}{self.decimal}{release}"
            f"{self.repetition}{self.terminator}"
        )


#: ``:+.? '``, what applies when an interchange has no UNA.
DEFAULT_DELIMITERS = Delimiters()

_FORBIDDEN_SEPARATORS = frozenset(" \t\r\n")


def parse_una(raw: bytes, *, offset: int | None = None, index: int | None = None) -> Delimiters:
    """Read the delimiters of a 9-byte UNA segment, refusing ones that cannot work.

    Raises:
        InvalidServiceStringAdvice: truncated, non-ASCII, alphanumeric or clashing
            separators.
    """
    if len(raw) < 9 or raw[:3] != b"UNA":
        raise InvalidServiceStringAdvice(
            "UNA must be followed by six service characters", offset=offset, segment_index=index
        )
    chars = raw[3:9].decode("latin-1")
    component, element, decimal = chars[0], chars[1], chars[2]
    release, repetition, terminator = chars[3], chars[4], chars[5]
    used = [component, element, terminator] + ([] if release == " " else [release])
    problem = None
    if any(ord(c) > 0x7F for c in used):
        problem = "non-ASCII separator"
    elif any(c.isalnum() for c in used):
        problem = "letter or digit used as a separator"
    elif any(c in _FORBIDDEN_SEPARATORS for c in (component, element)) or terminator in " \t":
        problem = "whitespace used as a separator"
    elif len(set(used)) != len(used):
        problem = "the same character declared for two roles"
    if problem is not None:
        raise InvalidServiceStringAdvice(
            f"unusable UNA service characters {chars!r}: {problem}",
            offset=offset,
            segment_index=index,
        )
    declared = Delimiters(
        component=component,
        element=element,
        decimal=decimal,
        release=None if release == " " else release,
        repetition=repetition,
        terminator=terminator,
    )
    # Reuse the default object when equal: hot paths test ``is DEFAULT_DELIMITERS``.
    return DEFAULT_DELIMITERS if declared == DEFAULT_DELIMITERS else declared


def split_segment(text: str, delimiters: Delimiters) -> list[Element]:
    """Split segment ``text`` into elements, the tag element first, releases applied.

    A release character at the very end (nothing left to release) is kept literally:
    the tokenizer reports it as a finding, and dropping it would change the value.
    """
    release = delimiters.release
    component = delimiters.component
    if release is None or release not in text:
        return [tuple(part.split(component)) for part in text.split(delimiters.element)]
    element_sep = delimiters.element
    elements: list[Element] = []
    components: list[str] = []
    value: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == release and i + 1 < n:
            value.append(text[i + 1])
            i += 2
            continue
        if char == component:
            components.append("".join(value))
            value = []
        elif char == element_sep:
            components.append("".join(value))
            elements.append(tuple(components))
            components, value = [], []
        else:
            value.append(char)
        i += 1
    components.append("".join(value))
    elements.append(tuple(components))
    return elements


def _escapes(specials: str, release: str) -> dict[int, str]:
    """A ``str.translate`` table that puts ``release`` before each special character."""
    return {ord(char): release + char for char in specials}


_DEFAULT_ESCAPES = _escapes("?:+'", "?")


def escape(value: str, delimiters: Delimiters = DEFAULT_DELIMITERS) -> str:
    """Prefix every service character in ``value`` with the release character."""
    if delimiters is DEFAULT_DELIMITERS or delimiters == DEFAULT_DELIMITERS:
        return value.translate(_DEFAULT_ESCAPES)
    release = delimiters.release
    if release is None:
        return value
    specials = release + delimiters.component + delimiters.element + delimiters.terminator
    return value.translate(_escapes(specials, release))


def canonical_separators(delimiters: Delimiters) -> bool:
    """Whether segment text under ``delimiters`` is already in canonical form.

    The decimal mark and the repetition separator change nothing in the text; the
    terminator does, because under another terminator a ``'`` is plain data that the
    canonical form must release.
    """
    return delimiters is DEFAULT_DELIMITERS or (
        delimiters.component == ":"
        and delimiters.element == "+"
        and delimiters.release == "?"
        and delimiters.terminator == "'"
    )


_UNNEEDED_RELEASE = re.compile(r"\?[^?:+']")


class Segment:
    """One segment, located in its stream.

    Attributes:
        tag: the segment tag (``"UNH"``, ``"RFF"``...).
        text: the decoded segment as sent, without the terminator and without the
            whitespace before it; release characters are still in place.
        offset: byte offset of ``text`` from the start of the stream.
        index: 0-based position in the stream; UNA counts.
        lead: whitespace (and any BOM) between the previous terminator and ``text``.
        term: the terminator that ended the segment; ``""`` for UNA and for a last
            segment the stream ended without terminating.
        delimiters: the separators in force for this segment.
    """

    __slots__ = ("_parsed", "delimiters", "index", "lead", "offset", "tag", "term", "text")

    # Positional on purpose: the tokenizer's fast pass builds segments with
    # ``map(Segment, tags, texts, ...)``, which only passes positional arguments.
    def __init__(  # noqa: PLR0917
        self,
        tag: str,
        text: str,
        offset: int,
        index: int,
        lead: str = "",
        term: str = "'",
        delimiters: Delimiters = DEFAULT_DELIMITERS,
    ) -> None:
        self.tag = tag
        self.text = text
        self.offset = offset
        self.index = index
        self.lead = lead
        self.term = term
        self.delimiters = delimiters
        self._parsed: tuple[Element, ...] | None = None

    def __repr__(self) -> str:
        # Deliberately without the text: segments carry personal data and must not
        # reach logs through an innocent repr().
        return f"<Segment {self.tag} #{self.index} @{self.offset}>"

    def _parse(self) -> tuple[Element, ...]:
        parsed = () if self.tag == "UNA" else tuple(split_segment(self.text, self.delimiters))
        self._parsed = parsed
        return parsed

    @property
    def elements(self) -> tuple[Element, ...]:
        """The data elements after the tag, each a tuple of components (parsed once)."""
        parsed = self._parsed if self._parsed is not None else self._parse()
        return parsed[1:]

    def components(self, element: int) -> Element:
        """The components of data element ``element`` (0-based), ``()`` when absent.

        Without a release character in the text, only the requested element is cut
        out (nothing is cached); otherwise the segment is parsed once and cached.
        Reading a qualifier and a value this way costs a third of a full parse, which
        matters on the few segments per consignment that the intake looks into.
        """
        parsed = self._parsed
        if parsed is None:
            delimiters = self.delimiters
            release = delimiters.release
            text = self.text
            if self.tag != "UNA" and (release is None or release not in text):
                parts = text.split(delimiters.element, element + 2)
                if element + 1 < len(parts):
                    return tuple(parts[element + 1].split(delimiters.component))
                return ()
            parsed = self._parse()
        element += 1
        return parsed[element] if element < len(parsed) else ()

    def get(self, element: int, component: int = 0) -> str:
        """Component ``component`` of data element ``element`` (0-based), or ``""``.

        Missing positions read as empty, which is what EDIFACT means by an omitted
        trailing element, so callers never need index checks on sender data.
        """
        parsed = self._parsed
        if parsed is None:
            delimiters = self.delimiters
            release = delimiters.release
            text = self.text
            if self.tag != "UNA" and (release is None or release not in text):
                parts = text.split(delimiters.element, element + 2)
                if element + 1 < len(parts):
                    components = parts[element + 1].split(delimiters.component, component + 1)
                    return components[component] if component < len(components) else ""
                return ""
            parsed = self._parse()
        element += 1
        if element < len(parsed):
            found = parsed[element]
            if component < len(found):
                return found[component]
        return ""

    @property
    def raw(self) -> str:
        """The segment exactly as sent: leading whitespace, text and terminator."""
        return self.lead + self.text + self.term

    def normalised(self) -> str:
        """The segment in canonical form: default separators, canonical escaping.

        The text is returned as is when it already uses the default separators and
        has no release character, which is nearly always.
        """
        text = self.text
        if self.tag == "UNA":
            return DEFAULT_DELIMITERS.una
        if canonical_separators(self.delimiters) and (
            "?" not in text or not _UNNEEDED_RELEASE.search(text.replace("??", ""))
        ):
            return text
        return "+".join(
            ":".join(escape(component) for component in element)
            for element in split_segment(text, self.delimiters)
        )
