"""Stream the elements of one big array inside a JSON document, in chunks.

A Kineto trace is one JSON object whose ``traceEvents`` array holds nearly all of its
bytes. Parsing the whole document into Python objects costs seconds and gigabytes; this
module instead cuts the array into chunks of complete elements, which a typed decoder
(msgspec) turns into structs a chunk at a time, so memory stays bounded by the chunk size.

Cutting is first tried without a tokenizer: a candidate cut is a ``}`` followed by
``,`` (or the closing ``]``). A candidate inside a string or a nested object leaves the
chunk unbalanced, which the decoder reports as truncated input; the chunk is then cut
where :class:`_Lexer` (a vectorised scan of strings and brackets) finds the last element
boundary instead. Lexing is deterministic from a known state, so a chunk that decodes is
a chunk of whole elements. The array itself is the one under the key at the top level
of the document (found by the same lexer: a key of that name nested in another field,
or inside a string, is not it); a second top-level key of that name, or anything but
space after a bare top-level array, is refused.

Real traces carry quirks that strict JSON decoders refuse (control characters inside
strings, bare ``N/A``, ``nan``, invalid UTF-8, lone UTF-16 surrogate escapes).
:func:`repair` rewrites them into valid JSON and reports each repair; callers record
those as warnings. A document in UTF-16 or UTF-32 (with or without a byte-order mark) is
read as UTF-8 (:func:`open_binary`); a UTF-8 byte-order mark is skipped.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

import msgspec
import numpy as np

from neurontrace.errors import BadInput
from neurontrace.io.ahead import ahead

BLOCK = 8 << 20  # bytes read per step
#: The key whose array a document may also be alone, as a bare top-level array.
CHROME_KEY = b"traceEvents"

#: Environment variable that sets :func:`token_limit`.
TOKEN_LIMIT_ENV = "NEURONTRACE_MAX_TOKEN_BYTES"
DEFAULT_TOKEN_LIMIT = 256 << 20

_WS = b" \t\r\n"
_BOM = codecs.BOM_UTF8


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


def _too_long(path: Path, what: str, at: int, limit: int) -> BadInput:
    return BadInput(
        f"{path}: {what} at byte {at} is longer than {limit:,} bytes, the limit on one "
        f"value (set {TOKEN_LIMIT_ENV} to raise it)"
    )


# -- opening ----------------------------------------------------------------------------


def _encoding(first: bytes) -> str | None:
    """The codec of a JSON text in UTF-16 or UTF-32, from its first four bytes (a
    byte-order mark, or the zero bytes around its first, ASCII, character as RFC 4627
    describes); None for UTF-8."""
    if first.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if first.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if len(first) < 4:
        return None
    zero = [b == 0 for b in first[:4]]
    if zero == [False, True, True, True]:
        return "utf-32-le"
    if zero == [True, True, True, False]:
        return "utf-32-be"
    if zero[:2] == [False, True] and zero[2:] in ([False, True], [True, True]):
        return "utf-16-le"
    if zero[:2] == [True, False]:
        return "utf-16-be"
    return None


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
    encoding = _encoding(first)
    if encoding is None:
        return f
    return _Transcoded(f, encoding)  # type: ignore[return-value]  # reads like a file


class _ReadAhead:
    """A gzip stream decompressed in a thread, a couple of blocks ahead of its reader.

    zlib inflates without holding the GIL, so decompressing (about a tenth of the time
    of reading a gzipped trace) overlaps decoding. Reads come back as the underlying
    ``read(block)`` calls returned them, and an error is raised at the read where the
    underlying stream raised it, after every block before it.
    """

    def __init__(self, f: BinaryIO, block: int) -> None:
        self.fileobj = getattr(f, "fileobj", None)  # for progress, as GzipFile has
        self._block = block
        self._blocks = ahead(iter(partial(f.read, block), b""))

    def read(self, n: int) -> bytes:
        assert n == self._block, "reads are whole blocks"
        return next(self._blocks, b"")

    def __enter__(self) -> _ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self._blocks.close()


@contextmanager
def _ahead(f: BinaryIO, block: int) -> Iterator[BinaryIO]:
    """``f`` itself, or for a gzip stream a :class:`_ReadAhead` of it."""
    if not isinstance(f, gzip.GzipFile):
        yield f
        return
    with _ReadAhead(f, block) as ahead:
        yield ahead  # type: ignore[misc]  # reads like the stream it wraps


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
    phase = 0  # 0: before the first token; 1: after an opening bracket; 2: past both
    skipped = 0
    try:
        with open_binary(path) as f:
            while len(out) < n:
                block = f.read(1 << 16)
                if not block:
                    break
                if not out and not skipped:
                    block = block.removeprefix(_BOM)
                while phase < 2 and block:
                    stripped = block.lstrip(_WS)
                    skipped += len(block) - len(stripped)
                    block = stripped
                    if not block:
                        break
                    if phase == 0 and block[:1] in (b"{", b"["):
                        out, block, phase = block[:1], block[1:], 1
                    else:
                        phase = 2
                if skipped > limit:
                    break
                out += block
    except (OSError, EOFError, zlib.error):
        return b""
    return out[:n]


T = TypeVar("T")


@dataclass
class Decoded(Generic[T]):
    value: T | None
    data: bytes | memoryview  # the elements' text, comma-separated, as decoded (after repair)
    offset: int  # byte offset of ``data`` in the (decompressed) document
    repairs: Repairs | None


# -- the lexer --------------------------------------------------------------------------

_LEX_STEP = 1 << 20  # bytes lexed per numpy pass (bounds its temporary arrays) ...
_LEX_FIRST = 16 << 10  # ... after a first one this small, then twice as many each time


class _Lexer:
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


# -- the array --------------------------------------------------------------------------


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

    # -- reading ---------------------------------------------------------------------
    def _read(self, f: BinaryIO) -> bytes:
        n = self.block if self.stop is None else min(self.block, self.stop - self._pos)
        if n <= 0:
            self._eof = True
            return b""
        try:
            b = f.read(n)
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

    def _more(self, f: BinaryIO, buf: bytes, what: str, at: int) -> bytes:
        """``buf`` and as much again read after it (at least a block): buffers grow
        geometrically, so growing one to any size copies it a bounded number of times.
        Refuses a buffer already past the limit (``what`` at byte ``at`` names it)."""
        if len(buf) > self.limit:
            raise _too_long(self.path, what, at, self.limit)
        parts = [buf]
        got = 0
        want = min(max(self.block, len(buf)), self.limit + 1 - len(buf))
        while got < want and not self._eof:
            more = self._read(f)
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def _find_start(self, f: BinaryIO) -> tuple[bytes, bytes, int]:
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
        lexer = _Lexer()
        lexed = 0  # bytes of buf lexed
        while True:
            if first >= 0 and len(buf) - first > self.limit:
                raise BadInput(
                    f'{self.path}: no "{self.key.decode()}" array in the first '
                    f"{self.limit:,} bytes (set {TOKEN_LIMIT_ENV} to look further)"
                )
            buf = self._more(f, buf, "the text before the array", 0) if not self._eof \
                else buf
            if first < 0:
                m = _NOT_WS.search(buf, len(_BOM) if buf.startswith(_BOM) else 0)
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
                        bracket = self._after_key(f, buf, p + len(key))
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

    def _after_key(self, f: BinaryIO, buf: bytes, j: int) -> tuple[int, bytes]:
        """After a top-level string ending at ``j``: (offset of the '[' of its value
        when it is a key whose value is an array, else -1; the buffer, read further
        as needed). A key whose value is not an array is refused."""
        want_colon = True
        while True:
            m = _NOT_WS.search(buf, j)
            if m is None:
                if self._eof:
                    raise BadInput(f"{self.path}: truncated: the file ends at byte {len(buf)}")
                buf = self._more(f, buf, "the text before the array", 0)
                continue
            c = buf[m.start():m.start() + 1]
            if want_colon:
                if c != b":":
                    return -1, buf  # a string value, not a key
                want_colon = False
                j = m.end()
                continue
            if c != b"[":
                raise BadInput(
                    f'{self.path}: "{self.key.decode()}" at the top level is not an array '
                    f"(it starts with {buf[m.start():m.start() + 20]!r} at byte {m.start()})"
                )
            return m.start(), buf

    def decoded(self, decode: Callable[[bytes], T], lenient: bool = False
                ) -> Iterator[Decoded[T]]:
        """Decode the array a chunk at a time; ``decode`` gets ``[elements]`` as bytes.

        When ``decode`` raises ``msgspec.ValidationError`` (a field of an unexpected
        type), the chunk comes back with ``value`` None and its (valid JSON) text, for
        the caller's lenient path; with ``lenient``, so does a chunk whose text is valid
        JSON but that ``decode`` refuses otherwise (a string that is not valid UTF-8).
        """
        with open_binary(self.path) as raw, _ahead(raw, self.block) as f:
            self._file = f
            if self.start is None:
                head, buf, offset = self._find_start(f)
                self.head = head
            else:
                f.seek(self.start)
                self._pos = offset = self.start
                head, buf = b"", self._read(f)
            while True:
                if self.stop is not None and self._eof and not buf.strip(_WS):
                    return  # the span ends here, after a whole element and its comma
                if _peek(buf) == b"]":  # empty array, or closed right here
                    rest = buf.lstrip(_WS)
                    self._parse_outer(head, self._rest(f, rest, offset + len(buf) - len(rest)),
                                      offset + len(buf) - len(rest))
                    return
                buf, result, cut = self._chunk(f, buf, offset, decode, lenient)
                yield result
                end, closing = cut
                rest = buf[end:].lstrip(_WS)
                if closing:
                    if self.stop is not None:
                        raise Misaligned(self.stop)  # the array closed before the stop
                    at = offset + len(buf) - len(rest)
                    self._parse_outer(head, self._rest(f, rest, at), at)
                    return
                if rest[:1] != b",":
                    raise BadInput(f"{self.path}: expected ',' at byte {offset + end}")
                rest = rest[1:]
                offset += len(buf) - len(rest)
                buf = rest
                if not self._eof and len(buf) < self.block:
                    buf += self._read(f)

    def _chunk(self, f: BinaryIO, buf: bytes, offset: int, decode: Callable[[bytes], T],
               lenient: bool) -> tuple[bytes, Decoded[T], tuple[int, bool]]:
        """The next chunk of whole elements from the start of ``buf`` (read further as
        needed): (the buffer, the chunk decoded, (where it ends, whether the array
        closes there)). A quick cut first (the last ``},``); where that falls inside a
        string or nested value, the last element boundary the lexer finds."""
        cut = _next_cut(buf)
        while cut is None and not self._eof:
            buf = self._more(f, buf, *self._element(buf, offset))
            cut = _next_cut(buf)
        for _ in range(2):
            if cut is None:
                break
            try:
                return buf, self._decode(decode, memoryview(buf)[:cut[0]], offset,
                                         lenient=lenient), cut
            except Incomplete:  # cut fell inside a string or nested value
                break
            except ClosedAt as c:  # the array closed before the cut
                cut = (c.pos, True)
        buf, cut = self._exact_cut(f, buf, offset)
        return buf, self._decode(decode, memoryview(buf)[:cut[0]], offset, lenient=lenient,
                                 complete=True), cut

    def _element(self, buf: bytes, offset: int) -> tuple[str, int]:
        """What ``buf`` (at byte ``offset``) holds when it has grown too long, and where
        that starts, for the message."""
        m = _NOT_WS.search(buf)
        if m is None:
            return f"space in the {self.key.decode()} array", offset
        return f"an element of the {self.key.decode()} array", offset + m.start()

    def _exact_cut(self, f: BinaryIO, buf: bytes, offset: int
                   ) -> tuple[bytes, tuple[int, bool]]:
        """The last element boundary in ``buf`` (a comma between elements, or the
        array's closing bracket), by lexing it; reads further while there is none."""
        lexer = _Lexer()
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
            buf = self._more(f, buf, *self._element(buf, offset))
        if self.stop is not None:
            raise Misaligned(self.stop)
        raise BadInput(
            f"{self.path}: truncated: the {self.key.decode()} array is not "
            f"closed (the file ends at byte {offset + len(buf)}, inside the "
            f"events after byte {offset})"
        )

    def _rest(self, f: BinaryIO, rest: bytes, at: int) -> bytes:
        """``rest`` and everything after it in the file (the text after the array, at
        byte ``at``), at most :func:`token_limit` bytes of it."""
        parts = [rest]
        size = len(rest)
        while not self._eof:
            if size > self.limit:
                raise _too_long(self.path, f"the text after the {self.key.decode()} array",
                                at, self.limit)
            more = self._read(f)
            parts.append(more)
            size += len(more)
        if size > self.limit:
            raise _too_long(self.path, f"the text after the {self.key.decode()} array", at,
                            self.limit)
        return b"".join(parts)

    def position(self) -> int:
        """Bytes of the file consumed so far (compressed bytes for gzip), for progress."""
        raw = getattr(self._file, "fileobj", None)
        try:
            return int(raw.tell()) if raw is not None else self.bytes_read
        except (OSError, ValueError):
            return self.bytes_read

    def _decode(self, decode: Callable[[bytes], T], data: bytes | memoryview, offset: int,
                *, lenient: bool = False, complete: bool = False) -> Decoded[T]:
        return decode_chunk(self.path, decode, data, offset, lenient=lenient,
                            complete=complete)

    def _parse_outer(self, head: bytes, tail: bytes, tail_offset: int) -> None:
        if self.start is not None:  # the head is another span's: leave the tail
            self.tail = (tail, tail_offset)
            return
        self.outer = outer_fields(self.path, self.key, head, tail, tail_offset)


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
        m = _NOT_WS.search(tail, 1)
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


_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def _syntax_error(data: bytes) -> msgspec.DecodeError | None:
    """Why ``data`` is not JSON (msgspec's error), or None when it is."""
    try:
        _RAWS.decode(data)
    except msgspec.DecodeError as e:
        return e
    return None


def _is_utf8(data: bytes | memoryview) -> bool:
    try:
        codecs.utf_8_decode(data, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


def decode_chunk(path: Path, decode: Callable[[bytes], T], text: bytes | memoryview,
                 offset: int, *, lenient: bool = False, complete: bool = False
                 ) -> Decoded[T]:
    """Decode ``text`` (elements separated by commas) as ``[text]``, repairing quirks.

    Raises :class:`Incomplete` when ``text`` does not end at an element boundary (a cut
    inside a string or nested value), :class:`ClosedAt` when the array ends inside it,
    and :class:`BadInput` when the text is not JSON even after repair (or is nested more
    deeply than Python can decode). ``complete`` says ``text`` is known to end at a
    boundary: a decoder's "truncated" is then an error in the text. ``value`` is None
    (the lenient path) when the text is JSON that ``decode`` refuses for a type, or with
    ``lenient`` for any reason. ``text`` may be a view of a larger buffer: it is copied
    once, into the bracketed text decoded.
    """
    view = memoryview(text)
    end = len(view)
    while end and view[end - 1] in _WS:
        end -= 1
    if end and view[end - 1] == 0x2C:  # ','
        end -= 1
    view = view[:end]
    shape: _Shape | None = None  # where the elements end, found when a decode fails
    try:
        try:
            return Decoded(decode(b"".join((b"[", view, b"]"))), view, offset, None)
        except msgspec.ValidationError:
            err = _syntax_error(b"".join((b"[", view, b"]")))
            if err is None and _is_utf8(view):
                return Decoded(None, view, offset, None)
        except msgspec.DecodeError as e:
            err = e
        data = bytes(view)
        if err is not None and not complete:
            shape = _shape(data)
            _classify(shape, err, data)
        fixed, rep = repair(data)
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
    if shape is not None:  # repair keeps every bracket and quote: the same shape
        try:
            _classify(_shape(fixed), err, fixed)
        except ClosedAt:
            raise ClosedAt(shape.closes) from None  # where it closes in ``data``
    reason, at = decode_error_position(err)
    where = f"near byte {offset + max(at - 1, 0)}" if at is not None else (
        f"in the events starting at byte {offset}")
    raise BadInput(f"{path}: invalid JSON {where}: {reason}") from None


@dataclass(frozen=True)
class _Shape:
    """The structure of some elements of the array, by our lexer (quirks such as bare
    words, control characters, invalid UTF-8 or lone surrogate escapes change neither
    strings nor depth): where the array's own ']' closes it (the first byte at which the
    depth falls below the elements'; -1: nowhere), and whether the text ends inside a
    string or a nested value."""

    closes: int
    open_end: bool


def _shape(data: bytes) -> _Shape:
    lexer = _Lexer()
    for at, _, _, after, _ in lexer.feed(data):
        below = np.flatnonzero(after < 0)
        if len(below):
            return _Shape(at + int(below[0]), False)
    return _Shape(-1, lexer.in_string or lexer.depth > 0)


def _classify(shape: _Shape, err: Exception, data: bytes) -> None:
    """Why the elements ``data`` (of that ``shape``) failed to decode as ``[data]`` with
    ``err``, when it is the cut rather than the text: raises :class:`ClosedAt` when the
    array closes inside them and the decoder stopped after that, :class:`Incomplete`
    when they end inside a string or nested value and the decoder stopped at their end
    (or says no position: it ran out); returns when the text itself is at fault (a quirk
    to repair, or an error to report)."""
    _, at = decode_error_position(err)
    stop = None if at is None else at - 1  # the byte of ``data`` it stopped at
    if stop is None and not _is_utf8(data):
        return  # perhaps the encoding it refused: asked again once repaired
    if shape.closes >= 0:
        if stop is None or stop > shape.closes:
            raise ClosedAt(shape.closes)
    elif shape.open_end and (stop is None or stop >= len(data)):
        raise Incomplete


_NOT_WS = re.compile(rb"[^ \t\r\n]")


def _peek(buf: bytes) -> bytes:
    """The first byte of ``buf`` that is not whitespace (b"" if none), without a copy."""
    m = _NOT_WS.search(buf)
    return m.group() if m else b""


_SPACED_CUT = re.compile(rb"\}[ \t\r\n]+([,\]])")


def _next_cut(buf: bytes) -> tuple[int, bool] | None:
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


class Incomplete(Exception):
    """The chunk does not end at an element boundary."""


class Misaligned(Exception):
    """A span's stop is not just after a whole element of the array (see :func:`cuts`)."""

    def __init__(self, stop: int) -> None:
        super().__init__(f"no element boundary at byte {stop}")
        self.stop = stop


#: An object's end, its comma and the next object's start: where a span may stop.
_BETWEEN = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_WINDOW = 1 << 20


def array_start(path: Path, key: bytes) -> int:
    """Offset of the first byte after the array's ``[`` (plain UTF-8 files; others are
    refused with :class:`BadInput`)."""
    with open(path, "rb") as f:
        if _encoding(f.read(4)) is not None:
            raise BadInput(f"{path}: not UTF-8")
        f.seek(0)
        stream = ArrayStream(path, key, block=1 << 16)
        _, _, offset = stream._find_start(f)
    return offset


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


class ClosedAt(Exception):
    """The array closes inside the chunk, at ``pos``."""

    def __init__(self, pos: int) -> None:
        self.pos = pos


# -- repair ---------------------------------------------------------------------------

_TOKEN = re.compile(
    rb'"[^"\\]*+(?:\\[\s\S][^"\\]*+)*+("|\Z)'  # a string (control characters included;
    # one left open runs to the end, in one match)
    rb"|-?[0-9][0-9.eE+-]*+"  # a number (its letters are not bare words)
    rb"|-?[A-Za-z_][A-Za-z0-9_./+-]*+"  # a bare word (true, false, null, N/A, nan, ...)
)
_CTRL = re.compile(rb"[\x00-\x1f]")
_LITERALS = {b"true", b"false", b"null"}
#: A UTF-16 surrogate escape (the high half of a pair, or a lone low half).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: One escape in a string: a surrogate pair, a lone surrogate, or anything else.
_ESCAPE = re.compile(
    rb"\\(?:u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|u([dD][c-fC-F][0-9a-fA-F]{2})|[\s\S])"
)
#: Placeholders for lone surrogates are the escaped pairs of U+100000 + (case << 11) +
#: (surrogate - 0xD800): plane 16 private use, high halves DBC0-DBDF, written in upper
#: case. A text that holds such a character already (escaped in any case, or as
#: UTF-8) gets U+FFFD for its lone surrogates instead.
_PLACEHOLDER_PREFIX = re.compile(rb"\\u[dD][bB][cCdD]|\xf4[\x80-\x87]")
PLACEHOLDERS = re.compile(rb"\\u(DB[CD][0-9A-F])\\u(D[C-F][0-9A-F]{2})")
PLACEHOLDER_CHARS = re.compile("[\U00100000-\U00107fff]")
_REPLACEMENT = rb"\uFFFD"


@dataclass
class Repairs:
    control_chars: int = 0
    bare_words: int = 0
    first_bare_word: bytes = b""
    first_offset: int = -1
    invalid_utf8: int = 0  # sequences replaced with U+FFFD
    surrogates: int = 0  # lone surrogate escapes
    #: Lone surrogates became :data:`PLACEHOLDERS` (see :func:`restore_surrogates`),
    #: not U+FFFD.
    placeholders: bool = False


def _placeholder(escape: bytes) -> bytes:
    """The placeholder of one lone surrogate escape (``\\udXXX``, any case)."""
    hexa = escape[2:]
    case = sum(1 << i for i, c in enumerate(hexa) if 0x41 <= c <= 0x46)
    cp = 0x100000 + (case << 11) + int(hexa, 16) - 0xD800
    v = cp - 0x10000
    return b"\\u%04X\\u%04X" % (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF))


def restore_surrogates(text: bytes) -> bytes:
    """``text`` with each placeholder escape written back as the lone surrogate escape
    it stands for, exactly as the input spelled it."""

    def back(m: re.Match[bytes]) -> bytes:
        hi, lo = int(m.group(1), 16), int(m.group(2), 16)
        v = ((hi - 0xD800) << 10 | (lo - 0xDC00)) + 0x10000 - 0x100000
        case, s = v >> 11, 0xD800 + (v & 0x7FF)
        hexa = b"%04x" % s
        return b"\\u" + bytes(c - 32 if case >> i & 1 else c for i, c in enumerate(hexa))

    return PLACEHOLDERS.sub(back, text)


def repair(data: bytes) -> tuple[bytes, Repairs]:
    """Rewrite JSON-with-quirks into valid JSON, keeping every value.

    Invalid UTF-8 becomes U+FFFD; control characters inside strings become ``\\u00XX``
    escapes (lossless); a lone UTF-16 surrogate escape (``\\ud800``, which strict
    decoders refuse) becomes a placeholder that :func:`restore_surrogates` turns back
    (callers show it as U+FFFD where a value must be valid text); bare words that are
    not JSON literals (``N/A``, ``nan``, ``inf``, ...) become strings holding the same
    text.
    """
    rep = Repairs()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        fixed = data.decode("utf-8", errors="replace").encode("utf-8")
        rep.invalid_utf8 = fixed.count("\ufffd".encode()) - data.count("\ufffd".encode())
        data = fixed
    rep.placeholders = _PLACEHOLDER_PREFIX.search(data) is None

    def escape(m: re.Match[bytes]) -> bytes:
        if m.group(3) is None and (m.group(1) is None or m.group(2) is not None):
            return m.group(0)  # not a surrogate, or a whole pair
        rep.surrogates += 1
        lone = m.group(0)[:6]
        rest = m.group(0)[6:]
        return (_placeholder(lone) if rep.placeholders else _REPLACEMENT) + rest

    def fix(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        if tok[:1] == b'"':
            if _CTRL.search(tok):
                rep.control_chars += 1
                if rep.first_offset < 0:
                    rep.first_offset = m.start()
                tok = _CTRL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
            if _SURROGATE.search(tok):
                tok = _ESCAPE.sub(escape, tok)
            return tok
        if tok in _LITERALS or tok[:1].isdigit() or (tok[:1] == b"-" and tok[1:2].isdigit()):
            return tok  # a literal or a number
        rep.bare_words += 1
        if not rep.first_bare_word:
            rep.first_bare_word = tok
            if rep.first_offset < 0:
                rep.first_offset = m.start()
        return b'"' + tok + b'"'

    return _TOKEN.sub(fix, data), rep


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
