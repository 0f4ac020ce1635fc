"""Opening a JSON document to stream it: plain, gzipped, or in UTF-16 or UTF-32.

A document in UTF-16 or UTF-32 (with or without a byte-order mark) is read as UTF-8
(:func:`open_binary`); a gzip stream is decompressed in a thread, ahead of its reader
(:func:`read_ahead`). Everything is bounded: no value, and no text before or after the
array a reader streams, may be longer than :func:`token_limit` bytes (256 MiB unless
``NEURONTRACE_MAX_TOKEN_BYTES`` says otherwise).
"""

from __future__ import annotations

import codecs
import gzip
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import BinaryIO

from neurontrace.errors import BadInput
from neurontrace.io.ahead import ahead

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


# -- opening ----------------------------------------------------------------------------


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


@contextmanager
def read_ahead(f: BinaryIO, block: int) -> Iterator[BinaryIO]:
    """``f`` itself, or for a gzip stream a :class:`_ReadAhead` of it."""
    if not isinstance(f, gzip.GzipFile):
        yield f
        return
    stream = _ReadAhead(f, block)
    try:
        yield stream  # type: ignore[misc]  # reads like the stream it wraps
    finally:
        stream._blocks.close()  # stops the thread


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
                    block = block.removeprefix(BOM)
                while phase < 2 and block:
                    stripped = block.lstrip(WS)
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
