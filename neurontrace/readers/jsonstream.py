"""Stream the elements of one big array inside a JSON document, in chunks.

A Kineto trace is one JSON object whose ``traceEvents`` array holds nearly all of its
bytes. Parsing the whole document into Python objects costs seconds and gigabytes; this
module instead cuts the array into chunks of complete elements, which a typed decoder
(msgspec) turns into structs a chunk at a time, so memory stays bounded by the chunk size.

Cutting is first tried without a tokenizer: a candidate cut is a ``}`` followed by
``,`` (or the closing ``]``). A candidate inside a string or a nested object leaves the
chunk unbalanced, which the decoder reports as truncated input; the chunk is then cut
where the lexer (:class:`Lexer`, a vectorised scan of strings and brackets) finds the
last element boundary instead. Lexing is deterministic from a known state, so a chunk
that decodes is a chunk of whole elements. The array itself is the one under the key at
the top level of the document (found by the same lexer: a key of that name nested in
another field, or inside a string, is not it); a second top-level key of that name, or
anything but space after a bare top-level array, is refused. The document's other
top-level fields are decoded once the array has been read (:func:`outer_fields`);
:func:`cuts` splits a plain file's array into spans that can be decoded in parallel.

Quirks that strict JSON refuses are repaired (:mod:`.jsonrepair`). A document in UTF-16
or UTF-32 (with or without a byte-order mark) is read as UTF-8 (:func:`open_binary`); a
gzip stream is decompressed in a thread, ahead of its reader (:meth:`ArrayStream._reading`).
Everything is bounded: no element, and no text before or after the array, may be longer
than :func:`token_limit` bytes (256 MiB unless ``NEURONTRACE_MAX_TOKEN_BYTES`` says
otherwise), and every scan is linear in what it reads.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import os
import re
import sys
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

import msgspec
import numpy as np

from neurontrace.errors import BadInput
from neurontrace.io.ahead import ahead
from neurontrace.readers.jsonrepair import Repairs, decode_error_position, is_utf8, repair

#: What the readers and the tests import from here (some defined in jsonrepair).
__all__ = ["BLOCK", "ArrayStream", "Decoded", "Misaligned", "array_start", "cuts", "decode_chunk",
           "decode_error_position", "open_binary", "outer_fields", "read_head", "repair"]

BLOCK = 8 << 20  # bytes read per step
#: The key whose array a document may also be alone, as a bare top-level array.
CHROME_KEY = b"traceEvents"


T = TypeVar("T")


# -- the bound on one value --------------------------------------------------------------


#: Environment variable that sets :func:`token_limit`.
TOKEN_LIMIT_ENV = "NEURONTRACE_MAX_TOKEN_BYTES"
DEFAULT_TOKEN_LIMIT = 256 << 20

WS = b" \t\r\n"
BOM = codecs.BOM_UTF8


def token_limit() -> int:
    """The most bytes one element of the array, the text before it or the text after it
    may take: ``$NEURONTRACE_MAX_TOKEN_BYTES``, else 256 MiB. Bounds the memory a single
    value (or a gzip bomb of spaces) can make a read hold."""
    given = os.environ.get(TOKEN_LIMIT_ENV, "").strip()
    if not given:
        return DEFAULT_TOKEN_LIMIT
    if not given.isdigit() or int(given) < 1:
        raise BadInput(f"{TOKEN_LIMIT_ENV}={given!r} is not a positive number of bytes")
    return int(given)


def too_long(path: Path, what: str, at: int, limit: int) -> BadInput:
    return BadInput(
        f"{path}: {what} at byte {at} is longer than {limit:,} bytes, the limit on one "
        f"value (set {TOKEN_LIMIT_ENV} to raise it)"
    )


# -- opening -----------------------------------------------------------------------------


def encoding_of(first: bytes) -> str | None:
    """The codec of a JSON text in UTF-16 or UTF-32, from its first four bytes (a
    byte-order mark, or the zero bytes around its first, ASCII, character as RFC 4627
    describes); None for UTF-8."""
    if first.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if first.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if len(first) < 4:
        return None
    zeros = "".join("0" if b == 0 else "x" for b in first[:4])  # "x000": a byte, then three zeros
    if zeros.startswith("0x"):
        return "utf-16-be"
    return {"x000": "utf-32-le", "000x": "utf-32-be", "x0x0": "utf-16-le"}.get(zeros)


class _Transcoded:
    """A UTF-16 or UTF-32 byte stream read as UTF-8 (characters that do not decode
    become U+FFFD). Offsets in messages are then offsets in the UTF-8 text."""

    def __init__(self, f: BinaryIO, encoding: str) -> None:
        self._f = f
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self.fileobj = getattr(f, "fileobj", f)  # for progress: the bytes consumed

    def read(self, n: int = -1) -> bytes:
        while True:
            raw = self._f.read(n)
            text = self._decoder.decode(raw, final=not raw)
            if text or not raw:
                return text.encode("utf-8", errors="replace")

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> _Transcoded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_binary(path: Path) -> BinaryIO:
    """Open a file for reading, transparently un-gzipping ``.gz`` (detected by magic),
    and reading UTF-16 or UTF-32 text as UTF-8."""
    with open(path, "rb") as probe:
        first = probe.read(4)
    if first[:2] != b"\x1f\x8b":
        f: BinaryIO = open(path, "rb")  # noqa: SIM115 - returned to the caller
    else:
        f = gzip.open(path, "rb")  # type: ignore[assignment]  # owns (closes) the file
        try:
            first = f.peek(4)[:4]  # type: ignore[attr-defined]
        except (OSError, EOFError, zlib.error):
            return f  # the read says what is wrong, where
    encoding = encoding_of(first)
    if encoding is None:
        return f
    return _Transcoded(f, encoding)  # type: ignore[return-value]  # reads like a file


def read_head(path: Path, n: int = 4096) -> bytes:
    try:
        with open_binary(path) as f:
            return f.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise BadInput(f"{path}: cannot read: {e}") from None


def text_head(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` bytes of a JSON document's text from its first token on: UTF-8
    (see :func:`open_binary`), the byte-order mark and the space before the first token
    left out, and the space after an opening ``{`` or ``[`` too, so that the first key
    shows however much space precedes it. Reads past at most :func:`token_limit` bytes
    of space; b"" when the file cannot be read."""
    limit = token_limit()
    out = b""
    skipped = 0
    try:
        with open_binary(path) as f:
            while len(out) < n and skipped <= limit and (block := f.read(1 << 16)):
                text = out + (block.removeprefix(BOM) if not out and not skipped else block)
                out = _LEADING_SPACE.sub(rb"\1", text, count=1)
                skipped += len(text) - len(out)
    except (OSError, EOFError, zlib.error):
        return b""
    return out[:n]


#: The space before a document's first token, and after it when it opens an object or
#: an array.
_LEADING_SPACE = re.compile(rb"\A[ \t\r\n]*+([{[]?+)[ \t\r\n]*+")


# -- where elements end, without decoding them -------------------------------------------


_LEX_STEP = 1 << 20  # bytes lexed per numpy pass (bounds its temporary arrays) ...
_LEX_FIRST = 16 << 10  # ... after a first one this small, then twice as many each time


class Lexer:
    """Which bytes of a JSON text lie inside strings and how deeply each is nested,
    computed with numpy over the text a piece at a time (state carried between pieces),
    so a scan costs a few vectorised passes per byte whatever the text holds.

    A quote opens or closes a string unless an odd run of backslashes precedes it;
    brackets and braces outside strings change the depth. Quirks that strict JSON
    refuses (control characters, bare words, invalid UTF-8) do not change either.
    """

    def __init__(self, depth: int = 0) -> None:
        self.depth = depth
        self.in_string = False
        self.backslashes = 0  # the run of backslashes that ends the text so far

    def feed(self, text: bytes | bytearray | memoryview
             ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """For each piece of ``text``: (its offset in ``text``, its bytes, the depth
        before each byte, the depth after it, whether each byte comes outside every
        string: for a quote, whether it opens one)."""
        view = memoryview(text)
        at, step = 0, _LEX_FIRST
        while at < len(view):
            a = np.frombuffer(view[at:at + step], np.uint8)
            n = len(a)
            escaped = np.zeros(n, bool)
            bs = a == 0x5C
            if self.backslashes & 1:
                escaped[0] = True
            if bs.any():
                idx = np.arange(n, dtype=np.int32)
                last = np.maximum.accumulate(np.where(bs, np.int32(-1 - self.backslashes), idx))
                run = idx - last  # backslashes ending at each byte (0 where it is not one)
                escaped[1:] = (run[:-1] & 1).astype(bool)
                self.backslashes = int(run[-1])
            else:
                self.backslashes = 0
            quote = (a == 0x22) & ~escaped
            inside_after = (np.cumsum(quote, dtype=np.int32) + self.in_string) & 1
            outside = (inside_after ^ quote) == 0  # outside a string before this byte
            delta = ((a == 0x7B) | (a == 0x5B)).astype(np.int32)
            delta -= (a == 0x7D) | (a == 0x5D)
            delta *= outside
            after = np.cumsum(delta, dtype=np.int64)
            after += self.depth
            before = after - delta
            self.depth = int(after[-1])
            self.in_string = bool(inside_after[-1])
            yield at, a, before, after, outside
            at, step = at + n, min(2 * step, _LEX_STEP)



NOT_WS = re.compile(rb"[^ \t\r\n]")


def peek(buf: bytes) -> bytes:
    """The first byte of ``buf`` that is not whitespace (b"" if none), without a copy."""
    m = NOT_WS.search(buf)
    return m.group() if m else b""


_SPACED_CUT = re.compile(rb"\}[ \t\r\n]+([,\]])")


def next_cut(buf: bytes) -> tuple[int, bool] | None:
    """The position just after the last '}' of ``buf`` that is followed by ',' or ']'
    (whitespace aside), and whether the array closes there; None if there is none.

    The compact forms (``},`` and ``}]``) are found by searching back from the end; the
    spaced ones only when there is no compact one (a forward scan). Either way a scan
    in C, however many braces the buffer holds."""
    i = max(buf.rfind(b"},"), buf.rfind(b"}]"))
    if i >= 0:
        return i + 1, buf[i + 1] == 0x5D  # ']'
    last = None
    for m in _SPACED_CUT.finditer(buf):
        last = m
    if last is None:
        return None
    return last.start() + 1, last.group(1) == b"]"


class Misaligned(Exception):
    """A span's stop is not just after a whole element of the array (see :func:`cuts`)."""

    def __init__(self, stop: int) -> None:
        super().__init__(f"no element boundary at byte {stop}")
        self.stop = stop


#: An object's end, its comma and the next object's start: where a span may stop.
_BETWEEN = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_WINDOW = 1 << 20



def cuts(path: Path, targets: list[int]) -> list[int]:
    """Offsets near ``targets`` (ascending) that split a plain file's array into spans:
    each the start of an element that follows ``},``; targets with none near are dropped.

    A cut is only a candidate (the pattern may sit inside a string): the span that
    stops there proves it, or raises :class:`Misaligned` (see :class:`ArrayStream`).
    """
    found: list[int] = []
    with open(path, "rb") as f:
        for target in targets:
            f.seek(target)
            m = _BETWEEN.search(f.read(_WINDOW))
            if m is not None and (not found or target + m.end() - 1 > found[-1]):
                found.append(target + m.end() - 1)
    return found


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


class ArrayStream:
    """Decodes the elements of the array under ``key``, a chunk at a time.

    After iteration, :attr:`outer` holds the document with the array emptied (its other
    top-level fields), decoded.

    A *span* of the array (for readers that decode parts of one file in parallel) is
    given by ``start``, the offset of an element (None: the array's start), and
    ``stop``, an offset from :func:`cuts` (None: the array's end). A span that starts
    inside the array never sees the document's head: it leaves the text after the array
    in :attr:`tail` for :func:`outer_fields`. A span whose ``stop`` is not after a whole
    element raises :class:`Misaligned` at its end.
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
        self.bytes_read = 0
        self._pos = 0  # offset of the next byte read (plain files)
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
            self._pos = self.start
        self._file = f
        reads = iter(lambda: f.read(self.block if self.stop is None
                                    else max(0, min(self.block, self.stop - self._pos))), b"")
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
        self._pos += len(b)
        if not b:
            self._eof = True
        return b

    def _more(self, buf: bytes, what: str, at: int) -> bytes:
        """``buf`` and as much again read after it (at least a block): buffers grow
        geometrically, so growing one to any size copies it a bounded number of times.
        Refuses a buffer already past the limit (``what`` at byte ``at`` names it)."""
        if len(buf) > self.limit:
            raise too_long(self.path, what, at, self.limit)
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
        buf = b""
        first = -1  # offset of the document's first token
        lexer = Lexer()
        lexed = 0  # bytes of buf lexed
        while True:
            if first >= 0 and len(buf) - first > self.limit:
                raise BadInput(
                    f'{self.path}: no "{self.key.decode()}" array in the first '
                    f"{self.limit:,} bytes (set {TOKEN_LIMIT_ENV} to look further)"
                )
            buf = self._more(buf, "the text before the array", 0) if not self._eof \
                else buf
            if first < 0:
                m = NOT_WS.search(buf, len(BOM) if buf.startswith(BOM) else 0)
                if m is None:
                    if self._eof:
                        raise BadInput(f"{self.path}: not a JSON trace: no text in it")
                    continue
                first = m.start()
                c = buf[first:first + 1]
                if c == b"[" and self.key == CHROME_KEY:  # Chrome's "JSON Array Format"
                    return b"", buf[first + 1:], first + 1
                if c == b"[":
                    raise BadInput(
                        f'{self.path}: a bare JSON array, not an object with "'
                        f'{self.key.decode()}"'
                    )
                if c != b"{":
                    raise BadInput(
                        f"{self.path}: not a JSON trace: starts with {buf[first:first + 20]!r}"
                    )
                lexed = first
            # Lex all but the last len(key) - 1 bytes, so every key found starts in
            # the lexed part and ends in the buffer.
            upto = len(buf) if self._eof else max(lexed, len(buf) - len(key) + 1)
            for at, a, before, after, outside in lexer.feed(memoryview(buf)[lexed:upto]):
                at += lexed
                ends = np.flatnonzero(after <= 0)
                end = at + int(ends[0]) if len(ends) else -1  # the top level closes
                p = buf.find(key, at, at + len(a) + len(key) - 1)
                while p >= 0 and (end < 0 or p < end):
                    i = p - at
                    if before[i] == 1 and outside[i]:  # a string at the top level
                        bracket = self._after_key(buf, p + len(key))
                        buf = bracket[1]
                        if bracket[0] >= 0:
                            j = bracket[0]
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

    def _after_key(self, buf: bytes, j: int) -> tuple[int, bytes]:
        """After a top-level string ending at ``j``: (offset of the '[' of its value
        when it is a key whose value is an array, else -1; the buffer, read further
        as needed). A key whose value is not an array is refused."""
        m = _AFTER_KEY.match(buf, j)
        while m is None:
            if self._eof:
                raise BadInput(f"{self.path}: truncated: the file ends at byte {len(buf)}")
            buf = self._more(buf, "the text before the array", 0)
            m = _AFTER_KEY.match(buf, j)
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
                head, buf, offset = self._find_start()
                self.head = head
            else:
                offset = self.start
                head, buf = b"", self._read()
            while True:
                if self.stop is not None and self._eof and not buf.strip(WS):
                    return  # the span ends here, after a whole element and its comma
                if peek(buf) == b"]":  # empty array, or closed right here
                    end, closes = 0, True
                else:
                    buf, result, (end, closes) = self._chunk(buf, offset, decode, lenient)
                    yield result
                    if closes and self.stop is not None:
                        raise Misaligned(self.stop)  # the array closed before the stop
                rest = buf[end:].lstrip(WS)
                if closes:
                    at = offset + len(buf) - len(rest)
                    tail = self._rest(rest, at)
                    if self.start is not None:  # the head is another span's: leave the tail
                        self.tail = (tail, at)
                    else:
                        self.outer = outer_fields(self.path, self.key, head, tail, at)
                    return
                if rest[:1] != b",":
                    raise BadInput(f"{self.path}: expected ',' at byte {offset + end}")
                rest = rest[1:]
                offset += len(buf) - len(rest)
                buf = rest
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
        cut = next_cut(buf)
        while cut is None and not self._eof:
            buf = self._more(buf, *self._element(buf, offset))
            cut = next_cut(buf)
        if cut is not None:
            try:
                return buf, decode_chunk(self.path, decode, memoryview(buf)[:cut[0]], offset,
                                         lenient=lenient, quick=True), cut
            except _Unsure:
                pass
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
        while not self._eof:
            rest = self._more(rest, what, at)
        if len(rest) > self.limit:
            raise too_long(self.path, what, at, self.limit)
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
    try:
        try:
            return Decoded(decode(b"".join((b"[", view, b"]"))), view, offset, None)
        except msgspec.ValidationError:
            err = _syntax_error(b"".join((b"[", view, b"]")))
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


# -- the fields besides the array (the header) -------------------------------------------


#: What stands for the array while the rest of the document is decoded (a string no
#: trace holds), so that a second top-level key of the same name shows.
_PLACEHOLDER = "\x00neurontrace: the array read in chunks"
_PLACEHOLDER_JSON = msgspec.json.encode(_PLACEHOLDER)


class NumberText(str):
    """A number too large for a float, kept as its text (e.g. ``1e400`` in a header
    field): written to the trace's metadata as a string."""


def _number(text: str) -> float | NumberText:
    value = float(text)
    return value if value not in (float("inf"), float("-inf")) else NumberText(text)


_OUTER = msgspec.json.Decoder(float_hook=_number)


def outer_fields(path: Path, key: bytes, head: bytes, tail: bytes, tail_offset: int
                 ) -> dict:
    """The document's fields besides the array, from the text before the array (``head``,
    empty for a bare array) and after it (``tail``, from its ``]``, at ``tail_offset``).

    Numbers too large for a float are kept as :class:`NumberText`. Refused: a second
    top-level member named ``key``, text after a bare array, nesting deeper than Python
    can decode."""
    if not tail.startswith(b"]"):
        raise BadInput(f"{path}: expected ']' at byte {tail_offset}")
    if not head:  # bare array
        m = NOT_WS.search(tail, 1)
        if m is not None:
            raise BadInput(
                f"{path}: unexpected text after the top-level array at byte "
                f"{tail_offset + m.start()}: {tail[m.start():m.start() + 20]!r}"
            )
        return {}
    doc = head + _PLACEHOLDER_JSON + tail[1:]
    try:
        with _no_gc():  # a long header of small objects would start a collection per
            try:        # few thousand of them, each walking all made so far: quadratic
                outer = _OUTER.decode(doc)
            except msgspec.DecodeError:
                try:
                    outer = _OUTER.decode(repair(doc)[0])
                except msgspec.DecodeError as e:
                    raise BadInput(
                        f"{path}: top-level fields outside {key.decode()} are not valid "
                        f"JSON ({e})"
                    ) from None
    except RecursionError:
        raise BadInput(
            f"{path}: top-level fields outside {key.decode()} are nested too deeply "
            f"(over about {sys.getrecursionlimit()} levels)"
        ) from None
    if not isinstance(outer, dict):
        raise BadInput(f"{path}: top level is not a JSON object")
    if outer.get(key.decode()) != _PLACEHOLDER:
        raise BadInput(f'{path}: more than one top-level "{key.decode()}" member')
    outer.pop(key.decode())
    return outer


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector off (as it was before, after)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def array_start(path: Path, key: bytes) -> int:
    """Offset of the first byte after the array's ``[`` (plain UTF-8 files; others are
    refused with :class:`BadInput`)."""
    with open(path, "rb") as f:
        if encoding_of(f.read(4)) is not None:
            raise BadInput(f"{path}: not UTF-8")
        f.seek(0)
        stream = ArrayStream(path, key, block=1 << 16)
        with closing(stream._reading(f)):
            _, _, offset = stream._find_start()
    return offset
