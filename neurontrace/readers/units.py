"""Exact conversion of decimal time text to integer nanoseconds.

Kineto writes microseconds as decimals with three places (``5118349990281.582``). A
binary float holds such a value only approximately, and with an epoch-sized integer part
no float has the bits to hold it at all; so times are converted from their *text*, never
through a float. The vectorised path (Arrow's exact decimal parse) handles numbers with at
most three decimals (``123``, ``-1.5``, ``123.456``, ``1e3``); anything else (more
decimals, quoted numbers, values past int64) is placed against the decimal point as text,
one value at a time, in time linear in its length (whatever its exponent).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def microseconds_to_ns(values: Sequence[bytes]) -> tuple[pa.Array, list[int]]:
    """Decimal microsecond texts (one per value, bytes-like) to exact int64 nanoseconds.

    Fast path for the shapes Kineto writes (an integer, or up to three decimals, as in
    ``1661203465989924.0``): Arrow parses every value as a decimal with three places,
    exactly (it refuses more places, or text that is not a number); a chunk with a value
    it refuses, or one past int64, takes the exact slow way, :func:`decimal_text_to_ns`.
    """
    n = len(values)
    joined = b"\n".join(values)
    fast = _fast_ns(joined, n) if n else None
    if fast is not None:
        return fast, []
    return decimal_text_to_ns(bytes(v).decode("utf-8", errors="replace") for v in values)


#: The range of int64 (of nanoseconds).
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


#: Microseconds with three places, as Arrow parses them: the unscaled integer of each
#: is the time in nanoseconds.
_MICROSECONDS = pa.decimal128(38, 3)


def _fast_ns(joined: bytes, n: int) -> pa.Array | None:
    """The ``n`` values of ``joined`` (one a line) as nanoseconds when each is a decimal
    number with at most three places that fits int64; None otherwise."""
    try:  # one string split and parsed in Arrow's C++: no Python object per value
        texts = pc.split_pattern(pa.array([joined.decode("ascii")]), "\n").flatten()
        us = pc.cast(texts, _MICROSECONDS)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if len(us) != n:
        return None
    # Each unscaled 128-bit integer as its two 64-bit words (low, high): it fits int64
    # where the high word only repeats the low word's sign. int64's minimum, which
    # :func:`_slow` leaves null, goes that way too, so no value depends on its chunk.
    words = np.frombuffer(us.buffers()[1], np.int64, 2 * n, 16 * us.offset).reshape(n, 2)
    low = words[:, 0]
    if not np.array_equal(words[:, 1], low >> 63) or low.min() == I64_MIN:
        return None
    return pa.array(low)


def decimal_text_to_ns(texts: Iterable[str | None], scale: int = 1000
                       ) -> tuple[pa.Array, list[int]]:
    """Parse decimal text (in units of ``1/scale`` ... i.e. µs when scale=1000) to int ns.

    Returns the int64 array (null where the text is empty or not a number) and the
    indices of values that needed rounding (more decimals than nanoseconds hold).
    ``scale`` must be a power of ten; 1000 converts microseconds, 1 nanoseconds. One
    value at a time (:func:`_slow`): only what :func:`_fast_ns` refuses comes here, and
    per value it is as quick as a vectorised parse of decimal text in Polars was.
    """
    parsed = [_slow(text, scale) if text is not None else (None, True) for text in texts]
    rounded = [i for i, (_, exact) in enumerate(parsed) if not exact]
    return pa.array([v for v, _ in parsed], pa.int64()), rounded


#: A decimal number as JSON (and Kineto) writes it, quotes and spaces stripped; ASCII
#: digits only, at least one of them before the exponent (not "", "." or "e5").
_DECIMAL = re.compile(r"([+-]?)(?=\.?[0-9])([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?)([0-9]+))?")
#: Exponent digits past which the exponent alone puts any value out of range (or at 0):
#: no text that fits in memory has this many digits to make up for it.
_EXPONENT_DIGITS = 15


def _slow(text: str, scale: int) -> tuple[int | None, bool]:
    """One decimal text in units of ``1/scale`` s (see :func:`decimal_text_to_ns`) to
    integer nanoseconds, rounded half to even: (value, exact), value None when the text
    is not a number or the result does not fit in int64.

    Exact and linear in the text's length: the digits are placed against the decimal
    point as text, and only the at most 19 digits left of it are ever made an integer,
    so an exponent such as ``1e999990`` costs nothing (decimal-to-integer conversion of
    such a value is quadratic).
    """
    m = _DECIMAL.fullmatch(text.strip().strip('"').strip())
    if m is None:
        return None, True
    sign, whole, frac, exp_sign, exp = m.groups()
    digits = whole + (frac or "")
    point = len(whole) + len(str(scale)) - 1  # digits before the point, in nanoseconds
    if exp:
        exp = exp.lstrip("0")
        shift = int(exp or "0") if len(exp) <= _EXPONENT_DIGITS else 10**_EXPONENT_DIGITS
        point += -shift if exp_sign == "-" else shift
    significant = digits.lstrip("0")
    point -= len(digits) - len(significant)
    if not significant:
        return 0, True
    if point > 19:  # at least 10**19: past int64
        return None, True
    if point < 0:  # under 0.1 ns
        return 0, False
    v = int(significant[:point].ljust(point, "0") or "0")
    rest = significant[point:].rstrip("0")  # the digits under 1 ns that count
    if rest > "5":  # round half to even (digits compare as text: "51" > "5" > "49")
        v += 1
    elif rest == "5":
        v += v & 1
    if sign == "-":
        v = -v
    if abs(v) > I64_MAX:
        return None, True
    return v, not rest
