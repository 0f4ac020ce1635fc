"""Open a JSON document as UTF-8 bytes; the bound on one value in it.

:func:`open_binary` reads a gzip stream (detected by its magic) decompressed, and a
document in UTF-16 or UTF-32 (with or without a byte-order mark) as UTF-8.
:func:`token_limit` is the most bytes one value may take (256 MiB unless
``NEURONTRACE_MAX_TOKEN_BYTES`` says otherwise): the readers refuse an element of the
array, or the text before or after it, that is longer.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import re
import zlib
from pathlib import Path
from typing import BinaryIO

from neurontrace.errors import BadInput

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
    given = os.environ.get(TOKEN_LIMIT_ENV, "").strip() or str(DEFAULT_TOKEN_LIMIT)
    if not given.isdecimal() or int(given) < 1:
        raise BadInput(f"{TOKEN_LIMIT_ENV}={given!r} is not a positive number of bytes")
    return int(given)


# -- opening -----------------------------------------------------------------------------


def encoding_of(first: bytes) -> str | None:
    """The codec of a JSON text in UTF-16 or UTF-32, from its first four bytes (a
    byte-order mark, or the zero bytes around its first, ASCII, character as RFC 4627
    describes); None for UTF-8."""
    if first.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if first.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    zeros = "".join("0" if b == 0 else "x" for b in first[:4])  # "x000": a byte, then three zeros
    if len(first) >= 4 and zeros.startswith("0x"):
        return "utf-16-be"
    return {"x000": "utf-32-le", "000x": "utf-32-be", "x0x0": "utf-16-le"}.get(zeros)


class _Transcoded(io.IOBase):
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
        super().close()


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
