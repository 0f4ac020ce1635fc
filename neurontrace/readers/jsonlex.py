"""Where the elements of a JSON array end, found without decoding them.

:func:`next_cut` finds a candidate (a ``}`` followed by ``,`` or the closing ``]``) by a
scan in C; a candidate may fall inside a string or a nested value. :class:`Lexer` tells
exactly: a vectorised scan (numpy) of which bytes lie inside strings and how deeply each
is nested, deterministic from a known state. :func:`cuts` picks where a plain file's
array may be split into spans; the span that stops there proves it or raises
:class:`Misaligned`. Every scan is linear in what it reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

# -- where elements end, without decoding them -------------------------------------------


_LEX_STEP = 1 << 20  # bytes lexed per numpy pass (bounds its temporary arrays)


class Lexer:
    """Which bytes of a JSON text lie inside strings and how deeply each is nested,
    computed with numpy over the text a piece at a time (state carried between pieces),
    so a scan costs a few vectorised passes per byte whatever the text holds.

    A quote opens or closes a string unless an odd run of backslashes precedes it;
    brackets and braces outside strings change the depth. Quirks that strict JSON
    refuses (control characters, bare words, invalid UTF-8) do not change either.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # the run of backslashes that ends the text so far

    def feed(self, text: bytes | bytearray | memoryview
             ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """For each piece of ``text``: (its offset in ``text``, its bytes, the depth
        before each byte, the depth after it, whether each byte comes outside every
        string: for a quote, whether it opens one)."""
        view = memoryview(text)
        for at in range(0, len(view), _LEX_STEP):
            a = np.frombuffer(view[at:at + _LEX_STEP], np.uint8)
            n = len(a)
            idx = np.arange(n, dtype=np.int32)
            last = np.maximum.accumulate(np.where(a == 0x5C, np.int32(-1 - self.backslashes),
                                                  idx))
            run = idx - last  # backslashes ending at each byte (0 where it is not one)
            escaped = np.empty(n, bool)
            escaped[0] = self.backslashes & 1
            escaped[1:] = run[:-1] & 1
            self.backslashes = int(run[-1])
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



NOT_WS = re.compile(rb"[^ \t\r\n]")


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
    stops there proves it, or raises :class:`Misaligned`
    (see :class:`.jsonstream.ArrayStream`).
    """
    found: list[int] = []
    with open(path, "rb") as f:
        for target in targets:
            f.seek(target)
            m = _BETWEEN.search(f.read(_WINDOW))
            if m is not None and (not found or target + m.end() - 1 > found[-1]):
                found.append(target + m.end() - 1)
    return found
