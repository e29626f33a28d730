"""Cut a byte stream into located segments, one chunk at a time.

The hot path works on bytes: each chunk is split on the terminator byte in C
(``bytes.split``) and only pieces that contain the release character go through the
slower check for an escaped terminator. Offsets are therefore byte offsets, and memory
is one chunk plus the one incomplete segment carried into the next chunk, whatever the
size of the file; :class:`~tidegate.edi.errors.SegmentTooLarge` caps that carry.
Time is linear in the input however it is chunked: chunks that cannot end the carried
segment are held without a rescan, and a run of escaped terminators is joined once
(joining piece by piece made ``?'`` repeated quadratic). What a reader sees before an
error is also independent of chunking: the segments cut before it are handed over
first.

A UNA may open any interchange, including the second of two concatenated ones; the
rest of the buffer is then re-split with the new separators (pydifact 0.2.3 silently
drops the first interchange in that case). A BOM and whitespace between segments
(newlines, CRLF, tab indentation) are skipped but kept in :attr:`Segment.lead`, so the
raw text of any run of segments can be reproduced byte for byte.

Why one module of ~730 lines: :meth:`Tokenizer._cut` is the reader's hot loop, one
generator whose state (the carry, the delimiters, the release run, the charset) lives in
its local variables, read without an attribute lookup per segment (``bench/edi.py``
times it); the helpers above it are its pieces. Split, each half would need the other's
locals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate, repeat
from operator import add, getitem, itemgetter, sub

from tidegate.edi.charsets import UNDECLARED, Charset, charset_for
from tidegate.edi.errors import (
    EdifactError,
    InvalidServiceStringAdvice,
    NotEdifactError,
    SegmentTooLarge,
)
from tidegate.edi.findings import (
    DEFAULT_MAX_FINDINGS_PER_CODE,
    DEFAULT_POLICY,
    Finding,
    FindingCap,
    FindingCode,
    FindingPolicy,
)
from tidegate.edi.syntax import DEFAULT_DELIMITERS, Delimiters, Segment, parse_una

__all__ = ["DEFAULT_MAX_SEGMENT_BYTES", "Tokenizer", "tokenize"]

#: Longest segment accepted, in bytes. Real segments are under 3 kB (an FTX with five
#: 512-character texts); the cap only exists so that unsegmented input cannot make the
#: tokenizer buffer a whole file.
DEFAULT_MAX_SEGMENT_BYTES = 1 << 20

_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_STARTS = (b"UNA", b"UNB", b"UNH")
_CHARSET_TAGS = frozenset({"UNB", "UNZ"})
#: In-memory input is fed to the loop in slices of this many bytes.
_SLICE = 1 << 16
_FAST_PASSES_PER_BUFFER = 16
#: The segment head the fast pass looks up: tag plus element separator.
_head = itemgetter(slice(0, 4))
_TAG = re.compile(r"[A-Z][A-Z0-9]{2}\Z")
_LEAD = re.compile(rb"(?:[ \t\r\n]|\xef\xbb\xbf)*")


def _skip_lead(data: bytes, pos: int) -> int:
    """Position of the first byte at or after ``pos`` that is not whitespace or a BOM."""
    match = _LEAD.match(data, pos)
    return pos if match is None else match.end()


def _escaped(piece: bytes, release: int) -> bool:
    """Whether ``piece`` ends in an odd run of release bytes (its terminator is data)."""
    run = 0
    i = len(piece) - 1
    while i >= 0 and piece[i] == release:
        run += 1
        i -= 1
    return run % 2 == 1


_NOT_WAITING, _IN_LEAD, _IN_SEGMENT = "not waiting", "in lead", "in segment"


def _waiting_state(carry: bytes, *, started: bool) -> str:
    """Whether more chunks can be held without a scan, and what would end the wait.

    Only when the carry is whitespace (a chunk with anything else may start a
    segment) or the beginning of an ordinary segment (only a terminator that is not
    released ends it). Not before the first segment (the start check must see the
    first bytes at once) and not in a possible UNA, whose own terminator is data.
    """
    if not started:
        return _NOT_WAITING
    start = _skip_lead(carry, 0)
    if start == len(carry):
        return _IN_LEAD
    if len(carry) - start >= 3 and not carry.startswith(b"UNA", start):
        return _IN_SEGMENT
    return _NOT_WAITING


def _release_run(data: bytes, release: bytes) -> int:
    """How many release bytes ``data`` ends with."""
    return len(data) - len(data.rstrip(release)) if release else 0


def _ends_segment(chunk: bytes, term: bytes, release_byte: int, run: int) -> bool:
    """Whether ``chunk`` holds a terminator that is not released.

    ``run`` is the number of release bytes the data before ``chunk`` ends with. Each
    release byte is looked at once at most (runs before two terminators never
    overlap), so a segment arriving in many small chunks costs time linear in its
    length instead of a rescan of everything held per chunk.
    """
    found = chunk.find(term)
    while found != -1:
        back = found - 1
        while back >= 0 and chunk[back] == release_byte:
            back -= 1
        released = found - 1 - back + (run if back < 0 else 0)
        if released % 2 == 0:
            return True
        found = chunk.find(term, found + 1)
    return False


def _fast_pass(
    data: bytes,
    *,
    offset: int,
    index: int,
    delimiters: Delimiters,
    codec: str,
    check_ascii: bool,
    known: dict[str, str],
    max_segment: int,
) -> tuple[list[Segment], int, bool]:
    """Cut the leading run of ordinary segments of ``data`` with bulk operations only.

    Returns the segments, the bytes they consumed, and whether that was every complete
    segment in ``data``. The run stops before the first segment that needs the careful
    per-segment loop: a head not seen before (new tag, UNA, BOM, invalid tag), a UNB
    or UNZ (they switch the character set), an empty or oversized segment, or an
    escaped terminator at the end of the buffer. Data that is not one byte per
    character in the current charset is left entirely to the loop. The segments are
    identical to what the loop would produce; only the speed differs.
    """
    if (codec != "latin-1" or check_ascii) and not data.isascii():
        return [], 0, False
    text = data.decode("latin-1")
    term = delimiters.terminator
    pieces = text.split(term)
    pieces.pop()
    complete = True
    release = delimiters.release
    if release is not None and release + term in text:
        pieces, complete = _merge_escaped(text, pieces, release, term)
    stripped = list(map(str.lstrip, pieces, repeat(" \t\r\n")))
    heads = list(map(_head, stripped))
    tags = list(map(known.get, heads))
    if None in tags and _learn(heads, tags, known, delimiters.element):
        tags = list(map(known.get, heads))
    stop = len(tags)
    if None in tags:
        stop = tags.index(None)
    for special in _CHARSET_TAGS:
        if special in tags:
            stop = min(stop, tags.index(special))
    if "" in stripped:
        stop = min(stop, stripped.index(""))
    if stop < len(tags):
        complete = False
        del pieces[stop:], stripped[stop:], tags[stop:]
    if not pieces:
        return [], 0, complete
    lengths = list(map(len, pieces))
    if max(lengths) > max_segment:
        return [], 0, False
    lead_lengths = list(map(sub, lengths, map(len, stripped)))
    starts = list(accumulate(map(add, lengths, repeat(len(term))), initial=offset))
    consumed = starts.pop() - offset
    leads: Iterable[str] = (
        map(getitem, pieces, map(slice, lead_lengths)) if any(lead_lengths) else repeat("")
    )
    segments = list(
        map(
            Segment,
            tags,  # no None left: the list was cut at the first one
            stripped,
            map(add, starts, lead_lengths),
            range(index, index + len(pieces)),
            leads,
            repeat(term),
            repeat(delimiters),
        )
    )
    return segments, consumed, complete


def _learn(heads: list[str], tags: list[str | None], known: dict[str, str], element: str) -> bool:
    """Add the valid heads among the unknown ones to ``known``; whether any was added.

    The same rule as the per-segment loop applies (a 3-character tag followed by the
    element separator, or alone), so learning here only moves ordinary segments to
    the fast path. UNA and anything invalid stay unknown for the loop to handle.
    """
    learned = False
    for head in {head for head, tag in zip(heads, tags, strict=True) if tag is None}:
        tag = head[:3]
        followed = len(head) == 3 or (len(head) == 4 and head[3] == element)
        if tag != "UNA" and followed and _TAG.match(tag) is not None:
            known[head] = tag
            learned = True
    return learned


def _merge_escaped(text: str, pieces: list[str], release: str, term: str) -> tuple[list[str], bool]:
    """Re-join pieces that ``str.split`` cut at an escaped terminator.

    Only the few places where a release character precedes a terminator are looked
    at, and the result is built front to back with one join per escaped run, so the
    cost is linear in the buffer even when it is nothing but escaped terminators.
    Returns the pieces and ``False`` if the last terminator is escaped (the segment
    continues after the buffer, so its pieces are dropped for the loop).
    """
    escaped = []
    marker = release + term
    count_from, terminators = 0, 0
    found = text.find(marker)
    while found != -1:
        end = found + len(marker) - 1
        run_start = found
        while run_start > 0 and text[run_start - 1] == release:
            run_start -= 1
        if (found - run_start + 1) % 2:
            terminators += text.count(term, count_from, end)
            count_from = end
            escaped.append(terminators)
        found = text.find(marker, end + 1)
    if not escaped:
        return pieces, True
    merged: list[str] = []
    taken = 0
    k, n = 0, len(escaped)
    while k < n:
        # Terminator ``escaped[k]`` is data: pieces first..last+1 are one segment.
        first = last = escaped[k]
        k += 1
        while k < n and escaped[k] == last + 1:
            last += 1
            k += 1
        merged.extend(pieces[taken:first])
        if last + 1 >= len(pieces):
            return merged, False
        merged.append(term.join(pieces[first : last + 2]))
        taken = last + 2
    merged.extend(pieces[taken:])
    return merged, True


class Tokenizer:
    """Iterate over the segments of ``source``, a bytes object or an iterable of chunks.

    Args:
        source: the whole input as ``bytes``, or any iterable of bytes chunks (a file
            read in blocks, a network body). Chunks may cut segments anywhere.
        max_segment_bytes: see :data:`DEFAULT_MAX_SEGMENT_BYTES`.
        policy: grades the findings the tokenizer makes.
        on_finding: called with each finding; when ``None`` they are collected in
            :attr:`findings`.
        max_findings_per_code: findings of one code passed on one by one; the rest
            are counted into one summary finding at the end (see
            :class:`~tidegate.edi.FindingCap`).

    Raises (while iterating):
        NotEdifactError: the input does not begin with UNA, UNB or UNH.
        InvalidServiceStringAdvice: a UNA is truncated or unusable.
        SegmentTooLarge: no terminator within ``max_segment_bytes``.

    Example:
        >>> [s.tag for s in Tokenizer(b"UNH+1+IFTSTA:D:00B:UN'BGM+23'UNT+3+1'")]
        ['UNH', 'BGM', 'UNT']
    """

    def __init__(
        self,
        source: bytes | Iterable[bytes],
        *,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        policy: FindingPolicy = DEFAULT_POLICY,
        on_finding: Callable[[Finding], None] | None = None,
        max_findings_per_code: int = DEFAULT_MAX_FINDINGS_PER_CODE,
    ) -> None:
        self._source = source
        self._max = max_segment_bytes
        self._policy = policy
        self._cap = FindingCap(max_findings_per_code)
        self.findings: list[Finding] = []
        self._emit = on_finding if on_finding is not None else self.findings.append
        self._charset = UNDECLARED
        self._decode_reported = False
        #: Segments yielded so far (updated per chunk, exact once iteration ends).
        self.segment_count = 0

    def __iter__(self) -> Iterator[Segment]:
        for batch in self.batches():
            yield from batch

    def _chunks(self) -> Iterator[bytes]:
        source = self._source
        if isinstance(source, bytes | bytearray | memoryview):
            # Slice big inputs so the per-pass lists stay small even without a file.
            data = bytes(source)
            for start in range(0, len(data), _SLICE):
                yield data[start : start + _SLICE]
            return
        for chunk in source:
            yield chunk if type(chunk) is bytes else bytes(chunk)

    def _report(self, code: FindingCode, message: str, *, index: int, offset: int) -> None:
        finding = self._policy.make(code, message, segment_index=index, offset=offset)
        if self._cap.admit(finding):
            self._emit(finding)

    def batches(self) -> Iterator[list[Segment]]:
        """Yield the segments a list per buffer: the fast way for a consumer to iterate.

        The summaries of capped findings are passed on when the stream ends, also by
        an error, so that no count is lost.
        """
        try:
            yield from self._cut()
        finally:
            for summary in self._cap.summaries():
                self._emit(summary)

    def _cut(self) -> Iterator[list[Segment]]:  # noqa: PLR0912, PLR0915
        """The tokenizer proper; see :meth:`batches`.

        One long function on purpose: the per-segment path keeps its state in local
        variables and does a handful of C-level operations per segment, and handing
        out lists saves a generator switch per segment; together that is most of the
        difference between ~100k and ~1M segments per second in CPython.
        """
        max_segment = self._max
        report = self._report
        delimiters = DEFAULT_DELIMITERS
        term_s = delimiters.terminator
        term = term_s.encode("latin-1")
        release = b"?"
        release_byte = release[0]
        element_sep = "+"
        self._set_charset(UNDECLARED)
        codec = "utf-8"
        check_ascii = False
        charset_tags = _CHARSET_TAGS
        #: segment head (tag plus the element separator) -> tag, for heads already
        #: validated. Emptied by a UNA: the old separator may be data under the new
        #: ones ("BGM+1" has no valid tag when the element separator is "*").
        known: dict[str, str] = {}
        index = 0
        base = 0
        carry = b""
        #: While the carry is the start of one segment (or only whitespace), chunks
        #: that cannot end it are held here unscanned; see _ends_segment.
        held: list[bytes] = []
        held_len = 0
        waiting = _NOT_WAITING
        run = 0
        started = False
        chunks = self._chunks()
        final = False
        out: list[Segment] = []
        emit = out.append
        while not final:
            chunk = next(chunks, None)
            if chunk is None:
                final = True
                buf = b"".join(held) if held else carry
            elif not chunk:
                continue
            elif waiting is not _NOT_WAITING and (
                not chunk.strip(_WHITESPACE)
                if waiting is _IN_LEAD
                else not _ends_segment(chunk, term, release_byte, run)
            ):
                if not held:
                    held.append(carry)
                held.append(chunk)
                held_len += len(chunk)
                if waiting is _IN_SEGMENT:
                    tail = _release_run(chunk, release)
                    run = run + tail if tail == len(chunk) else tail
                if held_len > max_segment:
                    raise SegmentTooLarge(
                        f"segment longer than {max_segment} bytes",
                        limit=max_segment,
                        offset=base,
                        segment_index=index,
                    )
                continue
            elif held:
                held.append(chunk)
                buf = b"".join(held)
            else:
                buf = carry + chunk if carry else chunk
            held = []
            pos = 0
            # Each fast pass stops at the first unusual segment; the loop below takes
            # that one segment and hands back. The budget bounds the rescans on input
            # that is unusual everywhere (fuzz, garbage); the loop then takes the rest.
            fast_budget = _FAST_PASSES_PER_BUFFER
            try:
                while True:
                    start = _skip_lead(buf, pos)
                    if not started:
                        if len(buf) - start < 3 and not final:
                            break
                        if buf[start : start + 3] not in _STARTS:
                            raise NotEdifactError(
                                "input does not start with UNA, UNB or UNH"
                                if start < len(buf)
                                else "input is empty",
                                offset=base + start,
                                segment_index=0,
                            )
                        started = True
                    if buf.startswith(b"UNA", start):
                        if len(buf) - start < 9:
                            if final:
                                raise InvalidServiceStringAdvice(
                                    "input ends inside the UNA segment",
                                    offset=base + start,
                                    segment_index=index,
                                )
                            break
                        delimiters = parse_una(
                            buf[start : start + 9], offset=base + start, index=index
                        )
                        emit(
                            Segment(
                                "UNA",
                                buf[start : start + 9].decode("latin-1"),
                                base + start,
                                index,
                                buf[pos:start].decode("utf-8", "replace"),
                                "",
                                delimiters,
                            )
                        )
                        index += 1
                        pos = start + 9
                        term_s = delimiters.terminator
                        term = term_s.encode("latin-1")
                        release = b"" if delimiters.release is None else delimiters.release.encode()
                        release_byte = release[0] if release else -1
                        element_sep = delimiters.element
                        known.clear()
                        self._set_charset(UNDECLARED)
                        codec, check_ascii = "utf-8", False
                        continue
                    if fast_budget:
                        fast_budget -= 1
                        segments, consumed, complete = _fast_pass(
                            buf[pos:] if pos else buf,
                            offset=base + pos,
                            index=index,
                            delimiters=delimiters,
                            codec=codec,
                            check_ascii=check_ascii,
                            known=known,
                            max_segment=max_segment,
                        )
                        if segments:
                            out.extend(segments)
                            index += len(segments)
                            pos += consumed
                            self.segment_count = index
                        if complete:
                            break
                    pieces = buf[pos:].split(term) if pos else buf.split(term)
                    pieces.pop()
                    term_len = len(term)
                    cur = base + pos
                    n = len(pieces)
                    i = 0
                    restart = False
                    while i < n:
                        piece = pieces[i]
                        i += 1
                        if release and release in piece and _escaped(piece, release_byte):
                            # Collect the run of pieces cut at escaped terminators and join
                            # it once: concatenating piece by piece is quadratic in the run.
                            j = i
                            while j < n and _escaped(pieces[j - 1], release_byte):
                                j += 1
                            if _escaped(pieces[j - 1], release_byte):
                                # The escaped terminator is the last one in the buffer: the
                                # segment continues in data not read yet.
                                break
                            piece = term.join(pieces[i - 1 : j])
                            i = j
                        size = len(piece)
                        if size > max_segment:
                            raise SegmentTooLarge(
                                f"segment longer than {max_segment} bytes",
                                limit=max_segment,
                                offset=cur,
                                segment_index=index,
                            )
                        stripped = piece.lstrip(_WHITESPACE)
                        if not stripped:
                            if not piece:
                                report(
                                    FindingCode.EMPTY_SEGMENT,
                                    "empty segment (two terminators in a row)",
                                    index=index,
                                    offset=cur,
                                )
                            cur += size + term_len
                            if fast_budget:
                                pos, restart = cur - base, True
                                break
                            continue
                        lead_len = size - len(stripped)
                        try:
                            text = stripped.decode(codec)
                        except UnicodeDecodeError:
                            text = self._fallback(stripped, index, cur + lead_len)
                        if check_ascii and not stripped.isascii():
                            check_ascii = False
                            report(
                                FindingCode.OUTSIDE_REPERTOIRE,
                                "8-bit characters in an interchange declared as 7-bit "
                                "(UNOA/UNOB): decoded as ISO-8859-1",
                                index=index,
                                offset=cur + lead_len,
                            )
                        tag = known.get(text[:4])
                        if tag is None:
                            if stripped.startswith(_BOM):
                                lead_len = _skip_lead(piece, 0)
                                stripped = piece[lead_len:]
                                if not stripped:
                                    cur += size + term_len
                                    if fast_budget:
                                        pos, restart = cur - base, True
                                        break
                                    continue
                                try:
                                    text = stripped.decode(codec)
                                except UnicodeDecodeError:
                                    text = self._fallback(stripped, index, cur + lead_len)
                            if text.startswith("UNA"):
                                pos = cur - base
                                restart = True
                                break
                            head = text.split(element_sep, 1)[0].split(delimiters.component, 1)[0]
                            tag = head[:3]
                            if not _TAG.match(head):
                                report(
                                    FindingCode.INVALID_SEGMENT_TAG,
                                    f"invalid segment tag {head[:8]!r}",
                                    index=index,
                                    offset=cur + lead_len,
                                )
                            elif text[3:4] in (element_sep, ""):
                                known[text[:4]] = tag
                        emit(
                            Segment(
                                tag,
                                text,
                                cur + lead_len,
                                index,
                                piece[:lead_len].decode("utf-8", "replace") if lead_len else "",
                                term_s,
                                delimiters,
                            )
                        )
                        if tag in charset_tags:
                            if tag == "UNB":
                                self._set_charset(
                                    self._charset_of(text, delimiters, index, cur + lead_len)
                                )
                            else:
                                self._set_charset(UNDECLARED)
                            codec, check_ascii = self._charset.codec, self._charset.ascii_only
                        index += 1
                        cur += size + term_len
                        if fast_budget:
                            pos, restart = cur - base, True
                            break
                    self.segment_count = index
                    if restart:
                        continue
                    pos = cur - base
                    break
            except EdifactError:
                # Hand over what was cut before the error, so that what a reader saw
                # before it is the same however the input was chunked.
                if out:
                    self.segment_count = index
                    yield out
                raise
            self.segment_count = index
            if out:
                yield out
                out = []
                emit = out.append
            carry = buf[pos:]
            base += pos
            if final:
                last = self._last(carry, base, index, delimiters, codec)
                if last is not None:
                    index += 1
                    yield [last]
                self.segment_count = index
            elif len(carry) > max_segment:
                raise SegmentTooLarge(
                    f"segment longer than {max_segment} bytes",
                    limit=max_segment,
                    offset=base,
                    segment_index=index,
                )
            else:
                held_len = len(carry)
                waiting = _waiting_state(carry, started=started)
                if waiting is _IN_SEGMENT:
                    run = _release_run(carry, release)

    def _set_charset(self, charset: Charset) -> None:
        self._charset = charset
        self._decode_reported = False

    def _fallback(self, data: bytes, index: int, offset: int) -> str:
        """Decode bytes the charset refused as ISO-8859-1, reporting it once per interchange."""
        if not self._decode_reported:
            self._decode_reported = True
            charset = self._charset
            if charset.declared:
                self._report(
                    FindingCode.ENCODING_INVALID,
                    f"bytes not valid {charset.codec}, decoded as ISO-8859-1",
                    index=index,
                    offset=offset,
                )
            else:
                self._report(
                    FindingCode.ENCODING_FALLBACK,
                    "no character set declared and not UTF-8: decoded as ISO-8859-1",
                    index=index,
                    offset=offset,
                )
        return data.decode("latin-1")

    def _charset_of(self, text: str, delimiters: Delimiters, index: int, offset: int) -> Charset:
        identifier = Segment("UNB", text, offset, index, delimiters=delimiters).get(0)
        charset = charset_for(identifier)
        if charset is None:
            self._report(
                FindingCode.UNKNOWN_SYNTAX_IDENTIFIER,
                f"unknown syntax identifier {identifier[:8]!r}: UTF-8 tried, ISO-8859-1 "
                "as fallback",
                index=index,
                offset=offset,
            )
            return UNDECLARED
        return charset

    def _dangling(self, text: str, delimiters: Delimiters, index: int, offset: int) -> None:
        release = delimiters.release
        run = len(text) - len(text.rstrip(release or ""))
        if run % 2 == 1:
            self._report(
                FindingCode.DANGLING_RELEASE,
                "release character at the end of a segment releases nothing",
                index=index,
                offset=offset,
            )

    def _last(
        self, rest: bytes, base: int, index: int, delimiters: Delimiters, codec: str
    ) -> Segment | None:
        """The bytes after the last terminator: nothing, or one unterminated segment."""
        lead_len = _skip_lead(rest, 0)
        body = rest[lead_len:]
        if not body:
            return None
        try:
            text = body.decode(codec)
        except UnicodeDecodeError:
            text = self._fallback(body, index, base + lead_len)
        head = text.split(delimiters.element, 1)[0].split(delimiters.component, 1)[0]
        if not _TAG.match(head):
            self._report(
                FindingCode.INVALID_SEGMENT_TAG,
                f"invalid segment tag {head[:8]!r}",
                index=index,
                offset=base + lead_len,
            )
        if delimiters.release is not None and text.endswith(delimiters.release):
            self._dangling(text, delimiters, index, base + lead_len)
        self._report(
            FindingCode.MISSING_TERMINATOR,
            "input ends without a segment terminator",
            index=index,
            offset=base + lead_len,
        )
        return Segment(
            head[:3],
            text,
            base + lead_len,
            index,
            rest[:lead_len].decode("utf-8", "replace"),
            "",
            delimiters,
        )


def tokenize(
    source: bytes | Iterable[bytes],
    *,
    max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
    policy: FindingPolicy = DEFAULT_POLICY,
    on_finding: Callable[[Finding], None] | None = None,
) -> Iterator[Segment]:
    """Shorthand for ``iter(Tokenizer(source, ...))``; findings go to ``on_finding``."""
    return iter(
        Tokenizer(source, max_segment_bytes=max_segment_bytes, policy=policy, on_finding=on_finding)
    )
