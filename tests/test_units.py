"""Times are exact to the nanosecond: decimal microsecond text never goes through a float."""

from __future__ import annotations

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from neurontrace.readers.units import decimal_text_to_ns, microseconds_to_ns

from support import reference_ns

NS = st.integers(min_value=-(10**18), max_value=9 * 10**18)


def as_us_text(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


@given(st.lists(NS, min_size=1, max_size=50))
def test_three_decimal_microseconds_convert_exactly(values: list[int]) -> None:
    texts = pl.Series([as_us_text(v) for v in values])
    out, rounded = decimal_text_to_ns(texts)
    assert out.to_pylist() == values
    assert rounded == []


def test_the_issue_example() -> None:
    out, _ = decimal_text_to_ns(pl.Series(["5118349990281.582"]))
    assert out.to_pylist() == [5118349990281582]
    # a float round trip gets this wrong:
    assert round(float("1695835542513910.123") * 1000) != 1695835542513910123
    out, _ = decimal_text_to_ns(pl.Series(["1695835542513910.123"]))
    assert out.to_pylist() == [1695835542513910123]


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_integer_microseconds(v: int) -> None:
    out, _ = decimal_text_to_ns(pl.Series([str(v)]))
    assert out.to_pylist() == [v * 1000]


def test_other_shapes_take_the_exact_slow_path() -> None:
    texts = pl.Series(["1e-3", "2.5E+1", "0.0005", "1.23456", '"7.5"', "", "abc", "1.5"])
    out, rounded = decimal_text_to_ns(texts)
    assert out.to_pylist() == [1, 25000, 0, 1235, 7500, None, None, 1500]
    assert rounded == [2, 3]  # 0.5 ns rounds to even; 1234.56 ns rounds to 1235


def test_fewer_decimals_are_padded() -> None:
    out, _ = decimal_text_to_ns(pl.Series(["1.5", "1.05", "-0.1"]))
    assert out.to_pylist() == [1500, 1050, -100]


def test_nanosecond_text_with_scale_one() -> None:
    out, _ = decimal_text_to_ns(pl.Series(["123", "-4"]), scale=1)
    assert out.to_pylist() == [123, -4]


def us_text_to_ns(text: str) -> int | None:
    return reference_ns(text)[0]


@given(NS)
def test_reference_agrees(ns: int) -> None:
    assert us_text_to_ns(as_us_text(ns)) == ns


#: Decimal texts of any shape: sign, integer and fraction digits, exponent, quotes.
SHAPES = st.builds(
    lambda sign, whole, point, frac, exp, quoted: (
        ('"' if quoted else "") + sign + whole + point + frac + exp + ('"' if quoted else "")),
    st.sampled_from(["", "-", "+"]),
    st.text("0123456789", max_size=22),
    st.sampled_from([".", ""]),
    st.text("0123456789", max_size=12),
    st.one_of(st.just(""), st.builds(lambda e, n: f"{e}{n}", st.sampled_from(["e", "E-", "e+"]),
                                     st.integers(0, 40).map(str))),
    st.booleans(),
)


@st.composite
def edges(draw: st.DrawFn) -> str:
    """A time at the edges: nanoseconds near int64's ends or anywhere, then digits under
    1 ns that tie (``5``) or nearly do, written with its point moved by an exponent."""
    ns = draw(st.one_of(st.integers(-(10**19), 10**19),
                        st.sampled_from([0, 2**63 - 2, 2**63 - 1, 2**63, -(2**63) + 1, -(2**63)])))
    tail = draw(st.one_of(st.sampled_from(["", "5", "50", "49", "51", "0005", "9"]),
                          st.text("0123456789", max_size=6)))
    digits, shift = str(abs(ns)) + tail, draw(st.integers(-4, 4))
    places = len(tail) + 3 + shift  # digits after the point once the exponent is written
    if places <= 0:
        body = digits + "0" * -places
    else:
        body = digits.rjust(places + 1, "0")
        body = f"{body[:-places]}.{body[-places:]}"
    return ("-" if ns < 0 else "") + body + (f"e{shift}" if shift else "")


@given(st.lists(st.one_of(SHAPES, edges()), min_size=1, max_size=8))
def test_times_are_the_standard_librarys_decimal_arithmetic(texts: list[str]) -> None:
    """Both paths (a chunk Arrow parses whole, and the exact one value at a time) against
    ``decimal``: the same nanoseconds, the same values marked rounded."""
    want = [reference_ns(t) for t in texts]
    out, _ = microseconds_to_ns([t.encode() for t in texts])
    assert out.to_pylist() == [v for v, _ in want]
    slow, rounded = decimal_text_to_ns(texts)
    assert slow.to_pylist() == [v for v, _ in want]
    assert rounded == [i for i, (v, exact) in enumerate(want) if v is not None and not exact]


def test_text_with_two_dots_is_not_a_number() -> None:
    # "1.2.3" was read as 1.2 us: the text after the second dot was dropped.
    arr, _ = decimal_text_to_ns(pl.Series(["1.2.3", "-4.5.6", "1.2"]))
    assert arr.to_pylist() == [None, None, 1200]


def test_times_at_the_edge_of_int64_convert_or_are_null_in_a_chunk_of_plain_times() -> None:
    """The vectorised path keeps a value only where its nanoseconds fit int64: the last
    one that does converts, the next is null, as the reference says."""
    last, past = b"9223372036854775.807", b"9223372036854775.808"
    out, _ = microseconds_to_ns([b"1.5", last])
    assert out.to_pylist() == [1500, 2**63 - 1]
    out, _ = microseconds_to_ns([b"1.5", past])
    assert out.to_pylist() == [1500, None] == [1500, us_text_to_ns(past.decode())]
    out, _ = microseconds_to_ns([b"1.5", b"-1" + past])
    assert out.to_pylist() == [1500, None] == [1500, us_text_to_ns("-1" + past.decode())]


def test_exponents_and_signs_convert_exactly_in_a_chunk_of_plain_times() -> None:
    texts = [b"5.000", b"1e3", b"+2.5", b"1E-3", b".5", b"7.", b"-0.000", b"00012.5"]
    out, rounded = microseconds_to_ns(texts)
    assert out.to_pylist() == [us_text_to_ns(t.decode()) for t in texts]
    assert out.to_pylist() == [5000, 1_000_000, 2500, 1, 500, 7000, 0, 12500]
    assert rounded == []


def test_the_int64_minimum_is_null_in_any_chunk_as_the_reference_says() -> None:
    """-2**63 ns was kept by the vectorised path but left null by the exact one, so its
    value depended on the other times of its chunk."""
    low = b"-9223372036854775.808"
    for chunk in ([low], [b"1.5", low], [b"1.2345", low], [b"-9223372036854775808e-3"]):
        out, _ = microseconds_to_ns(chunk)
        assert out.to_pylist()[-1] is None is us_text_to_ns(chunk[-1].decode())
