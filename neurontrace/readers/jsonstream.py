"""Stream the elements of one big array inside a JSON document, in chunks.

A Kineto trace is one JSON object whose ``traceEvents`` array holds nearly all of its
bytes. Parsing the whole document into Python objects costs seconds and gigabytes; this
module instead cuts the array into chunks of complete elements, which a typed decoder
(msgspec) turns into structs a chunk at a time, so memory stays bounded by the chunk size.

Cutting is done without a tokenizer: a candidate cut is a ``}`` followed by ``,`` (or
the closing ``]``). A candidate inside a string or a nested object leaves the chunk
unbalanced, which the decoder reports as truncated input; the chunk is then extended to
the next candidate. Lexing is deterministic from a known state, so a chunk that decodes
is a chunk of whole elements.

Real traces carry quirks that strict JSON decoders refuse (control characters inside
strings, bare ``N/A``, ``nan``). :func:`repair` rewrites them into valid JSON and reports
each repair; callers record those as warnings.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

import msgspec

from neurontrace.ahead import ahead
from neurontrace.errors import BadInput

BLOCK = 8 << 20  # bytes read per step
HEAD_LIMIT = 64 << 20  # how far to look for the array's start

_WS = b" \t\r\n"


def open_binary(path: Path) -> BinaryIO:
    """Open a file for reading, transparently un-gzipping ``.gz`` (detected by magic)."""
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]  # owns (closes) the file
    return open(path, "rb")  # noqa: SIM115 - returned to the caller


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


T = TypeVar("T")


@dataclass
class Decoded(Generic[T]):
    value: T | None
    data: bytes | memoryview  # the elements' text, comma-separated, as decoded (after repair)
    offset: int  # byte offset of ``data`` in the (decompressed) document
    repairs: Repairs | None


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
        self.outer: dict = {}
        self.head = b""  # the document before the array (when this span saw it)
        self.tail: tuple[bytes, int] | None = None  # the text after the array, its offset
        self.bytes_read = 0
        self._pos = 0  # offset of the next byte read (plain files)
        self._file: BinaryIO | None = None

    # -- reading ---------------------------------------------------------------------
    def _read(self, f: BinaryIO) -> bytes:
        n = self.block if self.stop is None else min(self.block, self.stop - self._pos)
        if n <= 0:
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
        return b

    def _find_start(self, f: BinaryIO) -> tuple[bytes, bytes, int]:
        """Return (text before the array, rest of buffer after '[', offset of rest)."""
        buf = b""
        pat = re.compile(rb'"' + re.escape(self.key) + rb'"\s*:\s*\[')
        while True:
            m = pat.search(buf)
            if m:
                return buf[: m.end() - 1], buf[m.end() :], m.end()
            stripped = buf.lstrip()
            if stripped[:1] == b"[":  # a bare array of events (Chrome "JSON Array Format")
                start = len(buf) - len(stripped) + 1
                return b"", buf[start:], start
            if stripped and stripped[:1] not in (b"{", b"["):
                raise BadInput(
                    f"{self.path}: not a JSON trace: starts with {stripped[:20]!r}"
                )
            if len(buf) > HEAD_LIMIT:
                break
            more = self._read(f)
            if not more:
                break
            buf += more
        raise BadInput(
            f'{self.path}: not a Chrome/Kineto trace: no "{self.key.decode()}" array '
            f"in the first {min(len(buf), HEAD_LIMIT)} bytes"
        )

    def decoded(self, decode: Callable[[bytes], T]) -> Iterator[Decoded[T]]:
        """Decode the array a chunk at a time; ``decode`` gets ``[elements]`` as bytes.

        When ``decode`` raises ``msgspec.ValidationError`` (a field of an unexpected
        type), the chunk comes back with ``value`` None and its (valid JSON) text, for
        the caller's lenient path.
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
            eof = False
            while True:
                if self.stop is not None and eof and not buf.strip(_WS):
                    return  # the span ends here, after a whole element and its comma
                if _peek(buf) == b"]":  # empty array, or closed right here
                    rest = buf.lstrip(_WS) + (b"" if eof else self._read_all(f))
                    self._parse_outer(head, rest, offset)
                    return
                cut = _next_cut(buf, len(buf), backwards=True)
                while cut is None and not eof:
                    more = self._read(f)
                    if not more:
                        eof = True
                        break
                    buf += more
                    cut = _next_cut(buf, len(buf), backwards=True)
                tried_close = False
                while True:
                    if cut is None and eof and not tried_close and self.stop is None:
                        # Elements that are not objects ("[..., 5]") leave no '}' cut:
                        # try the array's closing bracket itself.
                        tried_close = True
                        close = buf.rfind(b"]")
                        cut = (close, True) if close >= 0 else None
                    if cut is None and self.stop is not None:
                        raise Misaligned(self.stop)
                    if cut is None:
                        raise BadInput(
                            f"{self.path}: truncated: the {self.key.decode()} array is not "
                            f"closed (the file ends at byte {offset + len(buf)}, inside the "
                            f"events after byte {offset})"
                        )
                    end, closing = cut
                    try:
                        result = self._decode(decode, memoryview(buf)[:end], offset)
                        break
                    except Incomplete:  # cut fell inside a string or nested value
                        cut = _next_cut(buf, end, backwards=False)
                        while cut is None and not eof:
                            more = self._read(f)
                            if not more:
                                eof = True
                                break
                            buf += more
                            cut = _next_cut(buf, end, backwards=False)
                    except ClosedAt as c:  # the array closed before the cut
                        cut = (c.pos, True)
                yield result
                end, closing = cut
                rest = buf[end:].lstrip(_WS)
                if closing:
                    if self.stop is not None:
                        raise Misaligned(self.stop)  # the array closed before the stop
                    rest = rest + (b"" if eof else self._read_all(f))
                    self._parse_outer(head, rest, offset + end)
                    return
                if rest[:1] != b",":
                    raise BadInput(f"{self.path}: expected ',' at byte {offset + end}")
                rest = rest[1:]
                offset += len(buf) - len(rest)
                buf = rest
                if not eof and len(buf) < self.block:
                    more = self._read(f)
                    if more:
                        buf += more
                    else:
                        eof = True

    def position(self) -> int:
        """Bytes of the file consumed so far (compressed bytes for gzip), for progress."""
        raw = getattr(self._file, "fileobj", None)
        try:
            return int(raw.tell()) if raw is not None else self.bytes_read
        except (OSError, ValueError):
            return self.bytes_read

    def _read_all(self, f: BinaryIO) -> bytes:
        parts = []
        while more := self._read(f):
            parts.append(more)
        return b"".join(parts)

    def _decode(self, decode: Callable[[bytes], T], data: bytes | memoryview, offset: int
                ) -> Decoded[T]:
        return decode_chunk(self.path, decode, data, offset)

    def _parse_outer(self, head: bytes, tail: bytes, tail_offset: int) -> None:
        if self.start is not None:  # the head is another span's: leave the tail
            self.tail = (tail, tail_offset)
            return
        self.outer = outer_fields(self.path, self.key, head, tail, tail_offset)


def outer_fields(path: Path, key: bytes, head: bytes, tail: bytes, tail_offset: int
                 ) -> dict:
    """The document's fields besides the array, from the text before the array (``head``,
    empty for a bare array) and after it (``tail``, from its ``]``, at ``tail_offset``)."""
    if not tail.startswith(b"]"):
        raise BadInput(f"{path}: expected ']' at byte {tail_offset}")
    if not head:  # bare array
        return {}
    doc = head + b"[]" + tail[1:]
    try:
        outer = msgspec.json.decode(doc)
    except msgspec.DecodeError:
        try:
            outer = msgspec.json.decode(repair(doc)[0])
        except msgspec.DecodeError as e:
            raise BadInput(
                f"{path}: top-level fields outside {key.decode()} are not valid JSON ({e})"
            ) from None
    if not isinstance(outer, dict):
        raise BadInput(f"{path}: top level is not a JSON object")
    outer.pop(key.decode(), None)
    return outer


def decode_chunk(path: Path, decode: Callable[[bytes], T], text: bytes | memoryview,
                 offset: int) -> Decoded[T]:
    """Decode ``text`` (elements separated by commas) as ``[text]``, repairing quirks.

    Raises :class:`Incomplete` when ``text`` does not end at an element boundary (a cut
    inside a string or nested value), :class:`ClosedAt` when the array ends inside it,
    and :class:`BadInput` when the text is not JSON even after repair. ``text`` may be a
    view of a larger buffer: it is copied once, into the bracketed text decoded.
    """
    view = memoryview(text)
    end = len(view)
    while end and view[end - 1] in _WS:
        end -= 1
    if end and view[end - 1] == 0x2C:  # ','
        end -= 1
    view = view[:end]
    try:
        return Decoded(decode(b"".join((b"[", view, b"]"))), view, offset, None)
    except msgspec.ValidationError:
        return Decoded(None, bytes(view), offset, None)
    except msgspec.DecodeError as e:
        data = bytes(view)
        _classify(e, data)
    fixed, rep = repair(data)
    try:
        return Decoded(decode(b"[" + fixed + b"]"), fixed, offset, rep)
    except msgspec.ValidationError:
        return Decoded(None, fixed, offset, rep)
    except msgspec.DecodeError as e:
        at = decode_error_offset(e)
        if "truncated" in str(e) or (at is not None and at >= len(fixed) + 1):
            raise Incomplete from None
        where = f"near byte {offset + max(at - 1, 0)}" if at is not None else (
            f"in the events starting at byte {offset}")
        raise BadInput(f"{path}: invalid JSON {where}: {_reason(e)}") from None


def _classify(e: msgspec.DecodeError, data: bytes) -> None:
    at = decode_error_offset(e)
    if "truncated" in str(e) or (at is not None and at >= len(data) + 1):
        # The text ran out inside a string, or the ']' we appended closed nothing
        # (a cut after a nested '}'): not an element boundary.
        raise Incomplete from None
    if "trailing characters" in str(e) and at is not None:
        # '[' + elements + ']' closed early: the array's own ']' is inside data.
        pos = data.rfind(b"]", 0, at)
        if pos >= 0:
            raise ClosedAt(pos) from None


_NOT_WS = re.compile(rb"[^ \t\r\n]")


def _peek(buf: bytes) -> bytes:
    """The first byte of ``buf`` that is not whitespace (b"" if none), without a copy."""
    m = _NOT_WS.search(buf)
    return m.group() if m else b""


def _next_cut(buf: bytes, pos: int, backwards: bool) -> tuple[int, bool] | None:
    """A position just after a '}' that is followed by ',' or ']' (whitespace aside).

    Searches before ``pos`` (the last such) or after it (the first). Returns
    (position, whether the array closes there), or None.
    """
    n = len(buf)
    while True:
        i = buf.rfind(b"}", 0, pos) if backwards else buf.find(b"}", pos)
        if i < 0:
            return None
        j = i + 1
        while j < n and buf[j] in _WS:
            j += 1
        if j < n and buf[j] in b",]":
            return i + 1, buf[j] == 0x5D  # ']'
        pos = i if backwards else i + 1


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
    """Offset of the first byte after the array's ``[`` (plain files)."""
    stream = ArrayStream(path, key, block=1 << 16)
    with open(path, "rb") as f:
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


def _reason(e: Exception) -> str:
    return re.sub(r"\s*\(byte \d+\)", "", str(e))


# -- repair ---------------------------------------------------------------------------

_TOKEN = re.compile(
    rb'"(?:[^"\\]|\\.)*"'  # a string (control characters included)
    rb"|-?[A-Za-z_][A-Za-z0-9_./+-]*"  # a bare word (true, false, null, N/A, nan, ...)
)
_CTRL = re.compile(rb"[\x00-\x1f]")
_LITERALS = {b"true", b"false", b"null"}


@dataclass
class Repairs:
    control_chars: int = 0
    bare_words: int = 0
    first_bare_word: bytes = b""
    first_offset: int = -1


def repair(data: bytes) -> tuple[bytes, Repairs]:
    """Rewrite JSON-with-quirks into valid JSON, keeping every value.

    Control characters inside strings become ``\\u00XX`` escapes (lossless); bare words
    that are not JSON literals (``N/A``, ``nan``, ``inf``, ...) become strings holding
    the same text.
    """
    rep = Repairs()

    def fix(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        if tok[:1] == b'"':
            if _CTRL.search(tok):
                rep.control_chars += 1
                if rep.first_offset < 0:
                    rep.first_offset = m.start()
                return _CTRL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
            return tok
        if tok in _LITERALS:
            return tok
        rep.bare_words += 1
        if not rep.first_bare_word:
            rep.first_bare_word = tok
            if rep.first_offset < 0:
                rep.first_offset = m.start()
        return b'"' + tok + b'"'

    return _TOKEN.sub(fix, data), rep


def decode_error_offset(err: Exception) -> int | None:
    m = re.search(r"\(byte (\d+)\)", str(err))
    return int(m.group(1)) if m else None
