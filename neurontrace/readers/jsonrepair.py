"""JSON with the quirks real traces carry, rewritten as valid JSON.

Real traces carry quirks that strict JSON decoders refuse (control characters inside
strings, bare ``N/A``, ``nan``, invalid UTF-8, lone UTF-16 surrogate escapes).
:func:`repair` rewrites them into valid JSON and reports each repair; callers record
those as warnings.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

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
    invalid_utf8: int = 0  # sequences replaced with U+FFFD
    surrogates: int = 0  # lone surrogate escapes
    #: Lone surrogates became :data:`PLACEHOLDERS` (see :func:`restore_surrogates`),
    #: not U+FFFD.
    placeholders: bool = False


def _placeholder(escape: bytes) -> bytes:
    """The placeholder of one lone surrogate escape (``\\ud800`` to ``\\udfff``, hex
    digits in either case)."""
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


def is_utf8(data: bytes | memoryview) -> bool:
    try:
        codecs.utf_8_decode(data, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


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
    if not is_utf8(data):
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
                tok = _CTRL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
            if _SURROGATE.search(tok):
                tok = _ESCAPE.sub(escape, tok)
            return tok
        if tok in _LITERALS or tok[:1].isdigit() or (tok[:1] == b"-" and tok[1:2].isdigit()):
            return tok  # a literal or a number
        rep.bare_words += 1
        rep.first_bare_word = rep.first_bare_word or tok
        return b'"' + tok + b'"'

    return _TOKEN.sub(fix, data), rep
