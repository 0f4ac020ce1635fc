"""The top-level fields of a JSON document besides the array read in chunks (its header).

Decoded once the array has been read (:func:`outer_fields`), from the text before and
after the array with a placeholder in its place, so that a second top-level member of
the array's name shows (and is refused). Numbers too large for a float are kept as their
text (:class:`NumberText`).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import msgspec

from neurontrace.errors import BadInput
from neurontrace.readers.jsonlex import NOT_WS
from neurontrace.readers.jsonrepair import repair

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
    collecting = gc.isenabled()
    gc.disable()  # the collector would walk a long header's objects again and again: 38 MB
    try:          # of small objects decode in 1.5 s without it, 7.3 s with it
        try:  # repair only what does not decode: 21 s to repair those 38 MB
            outer = _OUTER.decode(doc)
        except msgspec.DecodeError:
            outer = _OUTER.decode(repair(doc)[0])
    except msgspec.DecodeError as e:
        raise BadInput(
            f"{path}: top-level fields outside {key.decode()} are not valid JSON ({e})"
        ) from None
    except RecursionError:
        raise BadInput(
            f"{path}: top-level fields outside {key.decode()} are nested too deeply "
            f"(over about {sys.getrecursionlimit()} levels)"
        ) from None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(outer, dict):
        raise BadInput(f"{path}: top level is not a JSON object")
    if outer.pop(key.decode(), None) != _PLACEHOLDER:
        raise BadInput(f'{path}: more than one top-level "{key.decode()}" member')
    return outer

