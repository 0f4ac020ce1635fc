"""Stream the elements of one big array inside a JSON document, in chunks.

A Kineto trace is one JSON object whose ``traceEvents`` array holds nearly all of its
bytes. Parsing the whole document into Python objects costs seconds and gigabytes; this
module instead cuts the array into chunks of complete elements, which a typed decoder
(msgspec) turns into structs a chunk at a time, so memory stays bounded by the chunk size.

Cutting is first tried without a tokenizer: a candidate cut is a ``}`` followed by
``,`` (or the closing ``]``). A candidate inside a string or a nested object leaves the
chunk unbalanced, which the decoder reports as truncated input; the chunk is then cut
where the lexer (:mod:`.jsonlex`, a vectorised scan of strings and brackets) finds the
last element boundary instead. Lexing is deterministic from a known state, so a chunk
that decodes is a chunk of whole elements. The array itself is the one under the key at
the top level of the document (found by the same lexer: a key of that name nested in
another field, or inside a string, is not it); a second top-level key of that name, or
anything but space after a bare top-level array, is refused. The document's other
top-level fields are decoded once the array has been read (:mod:`.jsonouter`); a
plain file's array may be split into spans (:func:`.jsonlex.cuts`) decoded in parallel.

Quirks that strict JSON refuses are repaired (:mod:`.jsonrepair`). A document in UTF-16
or UTF-32 (with or without a byte-order mark) is read as UTF-8 (:mod:`.jsonopen`); a
gzip stream is decompressed in a thread, ahead of its reader (:meth:`ArrayStream._reading`).
Everything is bounded: no element, and no text before or after the array, may be longer
than :func:`.jsonopen.token_limit` bytes, and every scan is linear in what it reads.
"""

from __future__ import annotations

import gzip
import re
import sys
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

import msgspec
import numpy as np

from neurontrace.errors import BadInput
from neurontrace.io.ahead import ahead
from neurontrace.readers.jsonlex import NOT_WS, Lexer, Misaligned, next_cut
from neurontrace.readers.jsonopen import (
    BOM,
    TOKEN_LIMIT_ENV,
    WS,
    encoding_of,
    open_binary,
    token_limit,
)
from neurontrace.readers.jsonouter import outer_fields
from neurontrace.readers.jsonrepair import Repairs, is_utf8, repair

BLOCK = 8 << 20  # bytes read per step
#: The key whose array a document may also be alone, as a bare top-level array.
CHROME_KEY = b"traceEvents"


T = TypeVar("T")


# -- decoding the array in chunks --------------------------------------------------------


@dataclass
class Decoded(Generic[T]):
    value: T | None
    data: bytes | memoryview  # the elements' text, comma-separated, as decoded (after repair)
    offset: int  # byte offset of ``data`` in the (decompressed) document
    repairs: Repairs | None


#: After a string: the colon that makes it a key (when there is one), and the first byte
#: of what follows. Possessive: a buffer that ends in space does not match (it is read
#: further), rather than match again with the colon taken as that first byte.
_AFTER_KEY = re.compile(rb"[ \t\r\n]*+(:?+)[ \t\r\n]*+([^ \t\r\n])")
#: The array's closing bracket, after space.
_CLOSES = re.compile(rb"[ \t\r\n]*+\]")


class ArrayStream:
    """Decodes the elements of the array under ``key``, a chunk at a time.

    After iteration, :attr:`tail` holds the text after the array and its offset, and
    :attr:`outer` the document with the array emptied (its other top-level fields),
    decoded.

    A *span* of the array (for readers that decode parts of one file in parallel) is
    given by ``start``, the offset of an element (None: the array's start), and
    ``stop``, an offset from :func:`cuts` (None: the array's end). A span that starts
    inside the array never sees the document's head: it leaves :attr:`outer` empty (the
    last span's :attr:`tail` is for :func:`outer_fields`). A span whose ``stop`` is not
    after a whole element raises :class:`Misaligned` at its end.
    """

    def __init__(self, path: Path, key: bytes, block: int | None = None,
                 start: int | None = None, stop: int | None = None) -> None:
        self.path = path
        self.key = key
        self.block = block if block is not None else BLOCK  # read now: tests shrink it
        self.start = start
        self.stop = stop
        self.limit = token_limit()
        self.outer: dict = {}
        self.head = b""  # the document before the array (when this span saw it)
        self.tail: tuple[bytes, int] | None = None  # the text after the array, its offset
        self.bytes_read = 0  # of the (decompressed) text, from the span's start
        self._eof = False
        self._file: BinaryIO | None = None
        self._blocks: Iterator[bytes] = iter(())

    # -- reading ---------------------------------------------------------------------
    def _reading(self, f: BinaryIO) -> Generator[bytes, None, None]:
        """Read ``f`` from the span's start (close what this returns when done), a block
        at a time up to its stop. A gzip stream is decompressed in a thread, a couple of
        blocks ahead: zlib inflates without holding the GIL, so decompressing (about a
        tenth of the time of reading a gzipped trace) overlaps decoding; an error comes
        at the read where the stream raised it, after every block before it."""
        if self.start is not None:
            f.seek(self.start)
        self._file = f
        reads = iter(lambda: f.read(self.block if self.stop is None else max(
            0, min(self.block, self.stop - (self.start or 0) - self.bytes_read))), b"")
        self._blocks = ahead(reads) if isinstance(f, gzip.GzipFile) else (b for b in reads)
        return self._blocks

    def _read(self) -> bytes:
        try:
            b = next(self._blocks, b"")
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise BadInput(
                f"{self.path}: compressed stream is truncated or corrupt after byte "
                f"{self.bytes_read} of the decompressed text ({e})"
            ) from None
        self.bytes_read += len(b)
        if not b:
            self._eof = True
        return b

    def _more(self, buf: bytes, what: str, at: int) -> bytes:
        """``buf`` and as much again read after it (at least a block): buffers grow
        geometrically, so growing one to any size copies it a bounded number of times.
        Refuses a buffer already past the limit (``what`` at byte ``at`` names it)."""
        if len(buf) > self.limit:
            raise BadInput(
                f"{self.path}: {what} at byte {at} is longer than {self.limit:,} bytes, the "
                f"limit on one value (set {TOKEN_LIMIT_ENV} to raise it)"
            )
        parts = [buf]
        got = 0
        want = min(max(self.block, len(buf)), self.limit + 1 - len(buf))
        while got < want and not self._eof:
            more = self._read()
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def _find_start(self) -> tuple[bytes, bytes, int]:
        """Return (text before the array from the document's first token, the rest of
        what was read after the array's '[', offset of that rest).

        The array is the value of the first member of the top-level object named
        ``key``; or, for ``traceEvents``, the document itself when it is a bare array
        (Chrome's "JSON Array Format", which is that array alone). Linear in the text
        before the array, which may be as long as :func:`token_limit`.
        """
        key = b'"' + self.key + b'"'
        what = "the text before the array"
        buf = b""
        while (m := NOT_WS.search(buf, len(BOM) if buf.startswith(BOM) else 0)) is None:
            if self._eof:
                raise BadInput(f"{self.path}: not a JSON trace: no text in it")
            buf = self._more(buf, what, 0)
        first = lexed = m.start()  # the document's first token; bytes of buf lexed
        if m.group() == b"[" and self.key == CHROME_KEY:  # Chrome's "JSON Array Format"
            return b"", buf[first + 1:], first + 1
        if m.group() == b"[":
            raise BadInput(
                f'{self.path}: a bare JSON array, not an object with "{self.key.decode()}"'
            )
        if m.group() != b"{":
            raise BadInput(
                f"{self.path}: not a JSON trace: starts with {buf[first:first + 20]!r}"
            )
        lexer = Lexer()
        while True:
            # Lex all but the last len(key) - 1 bytes, so every key found starts in
            # the lexed part and ends in the buffer.
            upto = len(buf) if self._eof else max(lexed, len(buf) - len(key) + 1)
            for at, a, before, after, outside in lexer.feed(memoryview(buf)[lexed:upto]):
                at += lexed
                ends = np.flatnonzero(after <= 0)
                end = at + int(ends[0]) if len(ends) else -1  # the top level closes
                p = buf.find(key, at, at + len(a) + len(key) - 1)
                while p >= 0 and (end < 0 or p < end):
                    if before[p - at] == 1 and outside[p - at]:  # a string at the top level
                        j, buf = self._after_key(buf, p + len(key))
                        if j >= 0:
                            return buf[first:j], buf[j + 1:], j + 1
                    p = buf.find(key, p + 1, at + len(a) + len(key) - 1)
                if end >= 0:
                    raise BadInput(
                        f'{self.path}: not a Chrome/Kineto trace: no "{self.key.decode()}" '
                        f"array in the top-level object (it closes at byte {end})"
                    )
            lexed = upto
            if self._eof:
                raise BadInput(
                    f'{self.path}: not a Chrome/Kineto trace: no "{self.key.decode()}" '
                    f"array (the file ends at byte {len(buf)}, inside the top-level object)"
                )
            if len(buf) - first > self.limit:
                raise BadInput(
                    f'{self.path}: no "{self.key.decode()}" array in the first '
                    f"{self.limit:,} bytes (set {TOKEN_LIMIT_ENV} to look further)"
                )
            buf = self._more(buf, what, 0)

    def _after_key(self, buf: bytes, j: int) -> tuple[int, bytes]:
        """After a top-level string ending at ``j``: (offset of the '[' of its value
        when it is a key whose value is an array, else -1; the buffer, read further
        as needed). A key whose value is not an array is refused."""
        while (m := _AFTER_KEY.match(buf, j)) is None:
            if self._eof:
                raise BadInput(f"{self.path}: truncated: the file ends at byte {len(buf)}")
            buf = self._more(buf, "the text before the array", 0)
        if not m.group(1):
            return -1, buf  # a string value, not a key
        if m.group(2) != b"[":
            raise BadInput(
                f'{self.path}: "{self.key.decode()}" at the top level is not an array '
                f"(it starts with {buf[m.start(2):m.start(2) + 20]!r} at byte {m.start(2)})"
            )
        return m.start(2), buf

    def decoded(self, decode: Callable[[bytes], T], lenient: bool = False
                ) -> Iterator[Decoded[T]]:
        """Decode the array a chunk at a time; ``decode`` gets ``[elements]`` as bytes.

        When ``decode`` raises ``msgspec.ValidationError`` (a field of an unexpected
        type), the chunk comes back with ``value`` None and its (valid JSON) text, for
        the caller's lenient path; with ``lenient``, so does a chunk whose text is valid
        JSON but that ``decode`` refuses otherwise (a string that is not valid UTF-8).
        """
        with open_binary(self.path) as f, closing(self._reading(f)):
            if self.start is None:
                self.head, buf, offset = self._find_start()
            else:
                buf, offset = self._read(), self.start
            while True:
                if self.stop is not None and self._eof and not buf.strip(WS):
                    return  # the span ends here, after a whole element and its comma
                if _CLOSES.match(buf):  # empty array, or closed right here
                    end, closes = 0, True
                else:
                    buf, result, (end, closes) = self._chunk(buf, offset, decode, lenient)
                    yield result
                    if closes and self.stop is not None:
                        raise Misaligned(self.stop)  # the array closed before the stop
                rest = buf[end:].lstrip(WS)
                if closes:
                    at = offset + len(buf) - len(rest)
                    self.tail = (self._rest(rest, at), at)
                    if self.start is None:  # else the head is another span's
                        self.outer = outer_fields(self.path, self.key, self.head, *self.tail)
                    return
                if rest[:1] != b",":
                    raise BadInput(f"{self.path}: expected ',' at byte {offset + end}")
                offset += len(buf) - len(rest) + 1
                buf = rest[1:]
                if not self._eof and len(buf) < self.block:
                    buf += self._read()

    def _chunk(self, buf: bytes, offset: int, decode: Callable[[bytes], T],
               lenient: bool) -> tuple[bytes, Decoded[T], tuple[int, bool]]:
        """The next chunk of whole elements from the start of ``buf`` (read further as
        needed): (the buffer, the chunk decoded, (where it ends, whether the array
        closes there)). A quick cut first (the last ``},``), kept when the text before
        it decodes; where it does not (the cut fell inside a string or nested value, or
        after the array's end, or the text holds a quirk to repair), the last element
        boundary the lexer finds."""
        while (cut := next_cut(buf)) is None and not self._eof:
            buf = self._more(buf, *self._element(buf, offset))
        if cut is not None:
            with suppress(_Unsure):
                return buf, decode_chunk(self.path, decode, memoryview(buf)[:cut[0]], offset,
                                         lenient=lenient, quick=True), cut
        buf, cut = self._exact_cut(buf, offset)
        return buf, decode_chunk(self.path, decode, memoryview(buf)[:cut[0]], offset,
                                 lenient=lenient), cut

    def _element(self, buf: bytes, offset: int) -> tuple[str, int]:
        """What ``buf`` (at byte ``offset``) holds when it has grown too long, and where
        that starts, for the message."""
        m = NOT_WS.search(buf)
        if m is None:
            return f"space in the {self.key.decode()} array", offset
        return f"an element of the {self.key.decode()} array", offset + m.start()

    def _exact_cut(self, buf: bytes, offset: int
                   ) -> tuple[bytes, tuple[int, bool]]:
        """The last element boundary in ``buf`` (a comma between elements, or the
        array's closing bracket), by lexing it; reads further while there is none."""
        lexer = Lexer()
        lexed = 0
        comma = -1
        while True:
            for at, a, before, after, outside in lexer.feed(memoryview(buf)[lexed:]):
                at += lexed
                closes = np.flatnonzero(after < 0)
                if len(closes):
                    return buf, (at + int(closes[0]), True)
                commas = np.flatnonzero((a == 0x2C) & (before == 0) & outside)
                if len(commas):
                    comma = at + int(commas[-1])
            lexed = len(buf)
            if comma >= 0:
                return buf, (comma, False)
            if self._eof:
                break
            buf = self._more(buf, *self._element(buf, offset))
        if self.stop is not None:
            raise Misaligned(self.stop)
        raise BadInput(
            f"{self.path}: truncated: the {self.key.decode()} array is not "
            f"closed (the file ends at byte {offset + len(buf)}, inside the "
            f"events after byte {offset})"
        )

    def _rest(self, rest: bytes, at: int) -> bytes:
        """``rest`` and everything after it in the file (the text after the array, at
        byte ``at``), at most :func:`token_limit` bytes of it."""
        what = f"the text after the {self.key.decode()} array"
        while not self._eof or len(rest) > self.limit:  # past the limit: _more refuses it
            rest = self._more(rest, what, at)
        return rest

    def position(self) -> int:
        """Bytes of the file consumed so far (compressed bytes for gzip), for progress."""
        raw = getattr(self._file, "fileobj", None)
        try:
            return int(raw.tell()) if raw is not None else self.bytes_read
        except (OSError, ValueError):
            return self.bytes_read


_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def _syntax_error(data: bytes) -> msgspec.DecodeError | None:
    """Why ``data`` is not JSON (msgspec's error), or None when it is."""
    try:
        _RAWS.decode(data)
    except msgspec.DecodeError as e:
        return e
    return None


_AT_BYTE = re.compile(r"\s*\(byte (\d+)\)")


def decode_error_position(err: Exception) -> tuple[str, int | None]:
    """(What ``err``, a decoder's error, says without its position; that position, a
    byte offset in the text it decoded, or None when it gives none).

    msgspec gives the position only in its message ("... (byte 42)"), so this is the
    one place that reads a decoder's message; worded otherwise, the message is kept
    whole and the error has no position (callers then name the chunk's start)."""
    text = str(err)
    m = _AT_BYTE.search(text)
    if m is None:
        return text, None
    return (text[:m.start()] + text[m.end():]).strip(), int(m.group(1))


class _Unsure(Exception):
    """A quick cut's text does not decode: the cut, or the text, is at fault."""


def decode_chunk(path: Path, decode: Callable[[bytes], T], text: bytes | memoryview,
                 offset: int, *, lenient: bool = False, quick: bool = False) -> Decoded[T]:
    """Decode ``text`` (elements separated by commas) as ``[text]``, repairing quirks.

    Raises :class:`BadInput` when the text is not JSON even after repair (or is nested
    more deeply than Python can decode); with ``quick`` (``text`` ends at a quick cut,
    which may fall inside an element), raises :class:`_Unsure` instead of repairing text
    that is not JSON. ``value`` is None (the lenient path) when the text is JSON that
    ``decode`` refuses for a type, or with ``lenient`` for any reason. ``text`` may be a
    view of a larger buffer: it is copied once, into the bracketed text decoded.
    """
    view = memoryview(text)
    end = len(view)
    while end and view[end - 1] in WS:
        end -= 1
    if end and view[end - 1] == 0x2C:  # ','
        end -= 1
    view = view[:end]
    bracketed = b"".join((b"[", view, b"]"))
    try:
        try:
            return Decoded(decode(bracketed), view, offset, None)
        except msgspec.ValidationError:
            err = _syntax_error(bracketed)
            if err is None and is_utf8(view):
                return Decoded(None, view, offset, None)
        except msgspec.DecodeError as e:
            err = e
        if quick and err is not None:
            raise _Unsure
        fixed, rep = repair(bytes(view))
        bracketed = b"[" + fixed + b"]"
        try:
            return Decoded(decode(bracketed), fixed, offset, rep)
        except msgspec.DecodeError as e:
            err = _syntax_error(bracketed)
            if err is None and (lenient or isinstance(e, msgspec.ValidationError)):
                return Decoded(None, fixed, offset, rep)
            err = err or e
    except RecursionError:
        raise BadInput(
            f"{path}: the events after byte {offset} are nested too deeply to decode "
            f"(over about {sys.getrecursionlimit()} levels)"
        ) from None
    reason, at = decode_error_position(err)
    where = f"near byte {offset + max(at - 1, 0)}" if at is not None else (
        f"in the events starting at byte {offset}")
    raise BadInput(f"{path}: invalid JSON {where}: {reason}") from None


def array_start(path: Path, key: bytes) -> int:
    """Offset of the first byte after the array's ``[`` (plain UTF-8 files; others are
    refused with :class:`BadInput`)."""
    stream = ArrayStream(path, key, block=1 << 16)
    with open(path, "rb") as f, closing(stream._reading(f)):
        if encoding_of(f.read(4)) is not None:
            raise BadInput(f"{path}: not UTF-8")
        f.seek(0)
        return stream._find_start()[2]
