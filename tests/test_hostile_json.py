"""Hostile Kineto JSON through the real command line: merely odd input converts (every
event kept) or is refused in one line with exit 2, never exit 1; the work is bounded
whatever the numbers, nesting, sizes or encodings; the input is never changed.

Each case runs ``neurontrace convert`` in-process through the real error boundary
(``neurontrace.cli.main.cli``). :func:`convert` checks what every case must hold: exit 0
or 2, one line on stderr when refused and no output left, the input bytes unchanged, and
for input that Python's ``json`` parses, one row per ``X``/``i``/``I``/``C`` event.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from neurontrace.cli.main import cli
from neurontrace.readers import jsonlex, jsonstream

ROW_PHASES = ("X", "i", "I", "C")
EVENT = {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 1.5,
         "dur": 2.25, "args": {"External id": 7}}


@dataclass
class Converted:
    code: int
    err: str
    table: pa.Table | None  # None when refused


def rows_by_json(data: bytes) -> int | None:
    """Rows the table must have when Python's json reads ``data``: its X/i/I/C events
    (None when json refuses it)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    events = doc if isinstance(doc, list) else doc.get("traceEvents") \
        if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return None
    return sum(1 for e in events if isinstance(e, dict) and e.get("ph") in ROW_PHASES)


def convert(data: bytes, *args: str, suffix: str = ".json") -> Converted:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"trace{suffix}"
        src.write_bytes(data)
        out = Path(tmp) / "out" / "trace.parquet"
        r = CliRunner().invoke(cli, ["convert", str(src), str(out), *args])
        assert src.read_bytes() == data, "the input was modified"
        err = r.stderr
        assert r.exit_code in (0, 2), f"exit {r.exit_code}: {err}{r.exception!r}"
        assert "Traceback" not in err
        if r.exit_code == 2:
            assert err.count("\n") == 1 and err.startswith("neurontrace: error: "), err
            assert not (out.parent.exists() and any(out.parent.iterdir())), "output left"
            return Converted(2, err, None)
        table = pq.read_table(out)
        want = rows_by_json(data if suffix == ".json" else gzip.decompress(data))
        if want is not None:
            assert table.num_rows == want, f"{table.num_rows} rows, {want} events: {err}"
        return Converted(0, err, table)


def trace(*events: Any, **fields: Any) -> bytes:
    return json.dumps({**fields, "traceEvents": list(events)}).encode()


def text(*events: bytes, head: bytes = b"", tail: bytes = b"") -> bytes:
    """A trace written by hand: events as given (JSON text, quirks and all)."""
    return b'{' + head + b'"traceEvents": [' + b", ".join(events) + b"]" + tail + b"}"


def column(table: pa.Table | None, name: str) -> list[Any]:
    assert table is not None
    return table.column(name).to_pylist()


def trace_field(table: pa.Table | None) -> dict[str, Any]:
    assert table is not None
    return json.loads((table.schema.metadata or {})[b"neurontrace.trace"])


# -- class 3: exit 1 on merely odd input ------------------------------------------------


def test_a_float_pid_and_a_bare_na_in_one_chunk_are_both_repaired() -> None:
    data = text(b'{"ph":"X","name":"a","ts":1,"dur":1,"pid":1.5,"tid":1}',
                b'{"ph":"X","name":"b","ts":1,"dur":1,"pid":1,"tid":1,"args":{"x":N/A}}')
    got = convert(data)
    assert got.code == 0, got.err
    assert column(got.table, "track")[0] == "1.5 / 1"
    assert json.loads(column(got.table, "args")[1]) == {"x": "N/A"}


def test_a_cut_after_a_field_of_another_type_is_extended_not_a_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk whose first event has a float pid, cut inside a later string: the typed
    decoder stops at the type, not at the cut; the chunk must still be extended."""
    monkeypatch.setattr(jsonstream, "BLOCK", 4096)
    events = [{**EVENT, "pid": 1.5 if i % 7 == 0 else 1, "name": "x}, {y" * 40, "ts": i}
              for i in range(300)]
    assert convert(trace(*events)).code == 0


def test_a_number_beyond_float_range_in_an_id_is_kept_as_text() -> None:
    got = convert(b'{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":1,"pid":1e400,'
                  b'"tid":-1e400}]}')
    assert got.code == 0, got.err
    assert column(got.table, "pid") == [None]
    assert column(got.table, "track") == ["1e400 / -1e400"]


def test_a_time_beyond_any_range_is_a_bad_time_not_a_crash() -> None:
    got = convert(b'{"traceEvents":[{"ph":"X","name":"a","ts":1e999999,"dur":1e-999999,'
                  b'"pid":1,"tid":1}]}')
    assert got.code == 0, got.err
    assert column(got.table, "start_ns") == [0] and column(got.table, "dur_ns") == [0]


@pytest.mark.parametrize("field", ["ts", "dur", "pid", "tid", "name", "cat", "ph", "args"])
def test_an_array_where_a_number_or_text_belongs_keeps_the_event(field: str) -> None:
    ev = {**EVENT, field: [1, [2.5, {"a": 1e400 if field == "args" else 3}]]}
    got = convert(trace(ev, EVENT) if field != "ph" else trace(EVENT, {**EVENT, "ph": "X"}))
    assert got.code == 0, got.err


def test_times_written_as_arrays_over_lines_keep_every_row() -> None:
    odd = {**EVENT, "ts": [1, 2], "dur": {"v": 1}}
    got = convert(json.dumps({"traceEvents": [EVENT, odd, EVENT, odd]}, indent=1).encode())
    assert got.code == 0, got.err
    assert column(got.table, "start_ns") == [1500, 0, 1500, 0]


def test_a_bare_array_is_only_ever_trace_events() -> None:
    """Chrome's "JSON Array Format" is the traceEvents array alone: read as another
    format's array, a bare array would lend it events it does not have."""
    got = convert(b"[" + json.dumps(EVENT).encode() + b"]", "--format", "neuron-system-json")
    assert got.code == 2 and "bare JSON array" in got.err


def test_an_out_of_range_distributed_rank_is_refused_in_one_line() -> None:
    got = convert(trace(EVENT, distributedInfo={"rank": 2**64}))
    assert got.code == 2 and "distributedInfo.rank" in got.err


def test_a_number_as_rank_beyond_float_range_is_refused_in_one_line() -> None:
    got = convert(text(json.dumps(EVENT).encode(), head=b'"distributedInfo":{"rank":1e400},'))
    assert got.code == 2 and "distributedInfo.rank" in got.err


@pytest.mark.parametrize("rank, code", [(3.0, 0), (3.5, 2), (1e300, 2)])
def test_a_float_rank_is_taken_only_when_it_is_an_exact_integer(rank: float, code: int) -> None:
    got = convert(trace(EVENT, distributedInfo={"rank": rank}))
    assert got.code == code, got.err
    if code == 0:
        assert column(got.table, "rank") == [3]


def test_a_rank_in_the_file_name_too_large_for_int64_is_not_a_rank() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"trace_rank_{'9' * 30}.json"
        src.write_bytes(trace(EVENT))
        r = CliRunner().invoke(cli, ["convert", str(src), str(Path(tmp) / "o.parquet")])
        assert r.exit_code == 0, r.stderr
        assert column(pq.read_table(Path(tmp) / "o.parquet"), "rank") == [0]


def test_an_out_of_range_rank_option_is_a_usage_error_in_one_line() -> None:
    got = convert(trace(EVENT), "--rank", str(2**63))
    assert got.code == 2 and "--rank" in got.err
    assert convert(trace(EVENT), "--rank", "-1").code == 2
    assert convert(trace(EVENT), "--rank", str(2**63 - 1)).code == 0


@pytest.mark.parametrize("where", ["args", "name", "ts", "header", "tail", "element"])
def test_nesting_100000_deep_is_refused_in_one_line(where: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    event = b'{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1,"args":{"x":1}}'
    data = {
        "args": text(event.replace(b'{"x":1}', deep)),
        "name": text(event.replace(b'"a"', deep)),
        "ts": text(event.replace(b'"ts":1', b'"ts":' + deep)),
        "header": text(event, head=b'"schemaVersion":1,"deep":' + deep + b","),
        "tail": text(event, tail=b',"deep":' + deep),
        "element": text(event, deep),
    }[where]
    start = time.monotonic()
    got = convert(data)
    assert got.code == 2 and "deep" in got.err, got.err
    assert time.monotonic() - start < MINUTES_GUARD


def test_nesting_a_few_hundred_deep_in_args_is_kept_exactly() -> None:
    args = b'{"x":' + b"[" * 300 + b"1" + b"]" * 300 + b"}"
    got = convert(text(json.dumps(EVENT).encode().replace(b'{"External id": 7}', args)))
    assert got.code == 0, got.err
    assert column(got.table, "args") == [args.decode()]


def test_a_span_that_would_end_past_int64_is_cut_to_end_there() -> None:
    late = b'{"ph":"X","name":"late","ts":9223372036854775.000,"dur":9223372036854775.807,' \
        b'"pid":1,"tid":1}'
    got = convert(text(late, json.dumps(EVENT).encode()))
    assert got.code == 0, got.err
    assert column(got.table, "start_ns")[0] + column(got.table, "dur_ns")[0] == 2**63 - 1


# -- class 4: unbounded work ------------------------------------------------------------

#: Seconds a case bounded by design may take. Not a speed test, a guard against the
#: unbounded ways (minutes: ``int(Decimal("1e999990"))`` alone takes 30 s): each case
#: takes under 0.5 s, so this is more than a 10x margin even on a loaded machine.
MINUTES_GUARD = 5.0



@pytest.mark.parametrize("value", [b"1e999990", b"-1e999990", b"1e-999990",
                                   b"1" * 100_000 + b".5", b'"1e999999999999999999999"'])
def test_a_huge_number_as_a_time_converts_in_bounded_time(value: bytes) -> None:
    data = b'{"traceEvents":[{"ph":"X","name":"a","ts":' + value + b',"dur":1,"pid":1,' \
        b'"tid":1}]}'
    start = time.monotonic()
    got = convert(data)
    assert time.monotonic() - start < MINUTES_GUARD
    assert got.code == 0, got.err


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token limit of 1 MiB, read in 64 KiB blocks (the limit holds to within a block:
    what one read brings in is looked at whole)."""
    monkeypatch.setenv("NEURONTRACE_MAX_TOKEN_BYTES", str(1 << 20))
    monkeypatch.setattr(jsonstream, "BLOCK", 64 << 10)


def _bounded(data: bytes, suffix: str = ".json.gz") -> tuple[Converted, int]:
    """Convert, in bounded time (see :data:`MINUTES_GUARD`); (result, peak memory traced
    meanwhile)."""
    start = time.monotonic()
    tracemalloc.start()
    try:
        got = convert(data, suffix=suffix)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 4 * MINUTES_GUARD  # inflating the bomb whole: minutes
    return got, peak


def test_a_gzip_bomb_of_space_is_refused_at_the_token_limit(limited: None) -> None:
    event = json.dumps(EVENT).encode()
    head = b'{"traceEvents":[' + event + b","
    bomb = gzip.compress(head + b" " * (96 << 20) + event + b"]}", compresslevel=1)
    got, peak = _bounded(bomb)
    assert got.code == 2
    assert f"space in the traceEvents array at byte {len(head)} " in got.err
    assert "NEURONTRACE_MAX_TOKEN_BYTES" in got.err
    assert peak < 16 << 20  # the bomb inflates to 96 MiB


def test_one_endless_token_is_refused_at_the_token_limit(limited: None) -> None:
    bomb = gzip.compress(b'{"traceEvents":[{"ph":"X","name":"' + b"a" * (96 << 20) + b'"}]}',
                         compresslevel=1)
    got, peak = _bounded(bomb)
    assert got.code == 2 and "an element of the traceEvents array at byte 16 " in got.err
    assert peak < 16 << 20


def test_the_token_limit_is_raised_by_its_variable(
        limited: None, monkeypatch: pytest.MonkeyPatch) -> None:
    data = trace({**EVENT, "args": {"note": "x" * (2 << 20)}})
    assert convert(data).code == 2
    monkeypatch.setenv("NEURONTRACE_MAX_TOKEN_BYTES", str(4 << 20))
    assert convert(data).code == 0


@pytest.mark.parametrize("where", ["head", "tail"])
def test_text_around_the_array_past_the_token_limit_is_refused(
        where: str, limited: None) -> None:
    long = {"note": "x" * (2 << 20)}
    data = trace(EVENT, schemaVersion=1, **long) if where == "head" else \
        json.dumps({"traceEvents": [EVENT], **long}).encode()
    got = convert(data)
    assert got.code == 2 and "NEURONTRACE_MAX_TOKEN_BYTES" in got.err


@dataclass
class Work:
    """What the JSON stream did, in bytes: lexed (by ``jsonlex.Lexer``), held in buffers grown
    for more text (``ArrayStream._more``'s results) and decoded (``decode_chunk``), and
    the decode calls. Linear work is a few times the text's bytes, whatever it holds."""

    lexed: int = 0
    buffered: int = 0
    decoded: int = 0
    decodes: int = 0


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Work:
    """The work of the JSON stream, counted from here on in this process."""
    w = Work()
    feed, more, decode = jsonlex.Lexer.feed, jsonstream.ArrayStream._more, \
        jsonstream.decode_chunk

    def counted_feed(self: Any, text: Any) -> Any:
        for piece in feed(self, text):
            w.lexed += len(piece[1])
            yield piece

    def counted_more(self: Any, *args: Any) -> bytes:
        buf = more(self, *args)
        w.buffered += len(buf)
        return buf

    def counted_decode(path: Path, fn: Any, text: Any, *args: Any, **kw: Any) -> Any:
        w.decoded += len(text)
        w.decodes += 1
        return decode(path, fn, text, *args, **kw)

    monkeypatch.setattr(jsonlex.Lexer, "feed", counted_feed)
    monkeypatch.setattr(jsonstream.ArrayStream, "_more", counted_more)
    monkeypatch.setattr(jsonstream, "decode_chunk", counted_decode)
    return w


@pytest.mark.parametrize("mib", [2, 16])
def test_a_long_header_field_is_found_in_linear_time(tmp_path: Path, work: Work,
                                                      mib: int) -> None:
    """The array's start after a long field (how parallel decoding plans its spans,
    in 64 KiB reads): each byte lexed once, and the buffer grown geometrically (lexing
    it again at each read, or growing it a read at a time, is quadratic)."""
    p = tmp_path / "h.json"
    p.write_bytes(b'{"schemaVersion":1,"x":"' + b"a" * (mib << 20) + b'","traceEvents":['
                  + json.dumps(EVENT).encode() + b"]}")
    size = p.stat().st_size
    assert jsonstream.array_start(p, b"traceEvents") == size - len(json.dumps(EVENT)) - 2
    assert work.lexed == size
    assert size <= work.buffered <= 4 * size, (work, size)
    assert convert(p.read_bytes()).code == 0


def test_a_long_string_of_brace_commas_is_cut_in_linear_time(
        monkeypatch: pytest.MonkeyPatch, work: Work) -> None:
    """Each '},' inside a 4 MiB string is a candidate cut (read in 64 KiB blocks, the
    string spans many); trying them one by one decodes the chunk again each time."""
    monkeypatch.setattr(jsonstream, "BLOCK", 64 << 10)
    data = trace(EVENT, {**EVENT, "name": "}, {" * (1 << 20)}, EVENT)
    got = convert(data)
    assert got.code == 0, got.err
    assert column(got.table, "name")[1] == "}, {" * (1 << 20)
    assert work.decodes <= 8, work
    assert work.decoded <= 2 * len(data) and work.lexed <= 2 * len(data), (work, len(data))
    assert work.buffered <= 4 * len(data), (work, len(data))


# -- class 5: events lost or wrongly read -----------------------------------------------


def test_a_nested_trace_events_key_does_not_hide_the_real_one() -> None:
    got = convert(trace(EVENT, EVENT, deviceProperties=[{"traceEvents": []}],
                        meta={"traceEvents": [{"ph": "X"}]}))
    assert got.code == 0 and column(got.table, "name") == ["aten::mul"] * 2
    assert trace_field(got.table)["meta"] == {"traceEvents": [{"ph": "X"}]}


def test_a_trace_events_string_value_is_not_the_key() -> None:
    got = convert(b'{"name": "traceEvents", "x": ["traceEvents", {"a": "traceEvents"}], '
                  b'"traceEvents": [' + json.dumps(EVENT).encode() + b"]}")
    assert got.code == 0 and trace_field(got.table)["name"] == "traceEvents"


def test_duplicate_top_level_trace_events_are_refused() -> None:
    event = json.dumps(EVENT).encode()
    got = convert(text(event, tail=b', "traceEvents": [' + event + b"]"))
    assert got.code == 2 and "more than one" in got.err


@pytest.mark.parametrize("after", [b" garbage", b"[]", b"\n[" + json.dumps(EVENT).encode()
                                   + b"]", b"{}", b",", b"]"])
def test_text_after_a_bare_array_is_refused(after: bytes) -> None:
    got = convert(b"[" + json.dumps(EVENT).encode() + b"]" + after)
    assert got.code == 2 and "after the top-level array" in got.err


def test_space_after_a_bare_array_is_fine() -> None:
    assert convert(b"[" + json.dumps(EVENT).encode() + b"]\n\t \r\n").code == 0


@pytest.mark.parametrize("doc", [
    b'{"traceEvents": {"a": 1}}',
    b'{"schemaVersion": 1, "traceEvents": null}',
    b'{"schemaVersion": 1} {"traceEvents": []}',
    b'{"schemaVersion": 1, "x": {"traceEvents": []}}',
])
def test_no_top_level_trace_events_array_is_refused(doc: bytes) -> None:
    assert convert(doc).code == 2


# -- class 6: refused though valid ------------------------------------------------------


def test_invalid_utf8_in_name_and_cat_is_kept() -> None:
    data = text(b'{"ph":"X","name":"frame <\xff\xfe>","cat":"py\xc3","ts":1,"dur":1,'
                b'"pid":1,"tid":1,"args":{"file":"ok"}}',
                json.dumps(EVENT).encode())
    got = convert(data)
    assert got.code == 0, got.err
    assert column(got.table, "name") == ["frame <\ufffd\ufffd>", "aten::mul"]
    assert column(got.table, "category") == ["py\ufffd", "cpu_op"]
    assert column(got.table, "args")[0] == '{"file":"ok"}'  # exact


def test_lone_surrogate_escapes_are_accepted_and_args_kept_exact() -> None:
    args = rb'{"a":"\uD800 and \udc00","pair":"\ud83d\ude00","b":"\\ud800"}'
    data = text(rb'{"ph":"X","name":"x\ud800y","cat":"c\uDFFF","ts":1,"dur":1,"pid":1,'
                rb'"tid":1,"args":' + args + b"}", json.dumps(EVENT).encode())
    got = convert(data)
    assert got.code == 0, got.err
    assert column(got.table, "name") == ["x\ufffdy", "aten::mul"]
    assert column(got.table, "category")[0] == "c\ufffd"
    assert column(got.table, "args")[0] == args.decode()


def test_a_lone_surrogate_at_the_end_of_a_chunk_is_not_taken_for_a_cut() -> None:
    got = convert(text(json.dumps(EVENT).encode(),
                       rb'{"ph":"X","name":"end\ud800","ts":1,"dur":1,"pid":1,"tid":1}'))
    assert got.code == 0 and column(got.table, "name")[1] == "end\ufffd"


def test_a_utf8_byte_order_mark_is_accepted() -> None:
    got = convert(b"\xef\xbb\xbf" + trace(EVENT, schemaVersion=1))
    assert got.code == 0, got.err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_text_is_decoded(encoding: str) -> None:
    doc = json.dumps({"schemaVersion": 1, "traceEvents": [{**EVENT, "name": "é ∑ 😀"}]},
                     ensure_ascii=False)
    got = convert(doc.encode(encoding))
    assert got.code == 0, got.err
    assert column(got.table, "name") == ["é ∑ 😀"]


def test_gzipped_utf16_text_is_decoded() -> None:
    data = gzip.compress(trace(EVENT, schemaVersion=1).decode().encode("utf-16"))
    assert convert(data, suffix=".json.gz").code == 0


@pytest.mark.parametrize("space", [b" \n\t", b" " * 10_000, b"\r\n" * 5_000])
def test_space_before_the_first_key_is_accepted(space: bytes) -> None:
    event = json.dumps(EVENT).encode()
    got = convert(space + b"{" + space + b'"traceEvents"' + space + b":" + space + b"["
                  + space + event + space + b"]" + space + b"}" + space)
    assert got.code == 0, got.err


def test_huge_numbers_in_header_fields_not_needed_are_kept_as_text() -> None:
    got = convert(text(json.dumps(EVENT).encode(),
                       head=b'"deviceProperties":[{"totalGlobalMem":1e400,"x":-1e999}],'
                            b'"big":123456789012345678901234567890,',
                       tail=b',"after":1e400'))
    assert got.code == 0, got.err
    fields = trace_field(got.table)
    assert fields["deviceProperties"] == [{"totalGlobalMem": "1e400", "x": "-1e999"}]
    assert fields["big"] == 123456789012345678901234567890 and fields["after"] == "1e400"


@pytest.mark.parametrize("base", [b"1e30", b"1e400", b"100000000000000000000000", b"1.5"])
def test_a_base_time_out_of_range_or_not_an_integer_is_refused(base: bytes) -> None:
    got = convert(text(json.dumps(EVENT).encode(), tail=b',"baseTimeNanoseconds":' + base))
    assert got.code == 2 and "baseTimeNanoseconds" in got.err


def test_a_base_time_that_puts_events_past_int64_is_refused() -> None:
    got = convert(trace({**EVENT, "ts": 9e12}, baseTimeNanoseconds=2**63 - 10))
    assert got.code == 2 and "baseTimeNanoseconds" in got.err


def test_a_base_time_in_range_is_applied() -> None:
    got = convert(trace(EVENT, baseTimeNanoseconds=1_700_000_000_000_000_000))
    assert got.code == 0 and column(got.table, "start_ns") == [1_700_000_000_000_001_500]


# -- the lexer that finds the array and cuts chunks --------------------------------------


def _lexed_byte_by_byte(text: bytes) -> list[tuple[int, int, bool]]:
    """(depth before, depth after, outside every string) of each byte, one at a time."""
    depth, inside, escaped, out = 0, False, False, []
    for c in text:
        before, outside = depth, not inside
        if c == 0x22 and not escaped:
            inside = not inside
        elif not inside and c in b"{[":
            depth += 1
        elif not inside and c in b"}]":
            depth -= 1
        escaped = c == 0x5C and not escaped
        out.append((before, depth, outside))
    return out


@pytest.mark.parametrize("piece", [1, 5, 4096, 1 << 20])
def test_the_lexer_agrees_with_a_byte_by_byte_scan(piece: int) -> None:
    import random

    rng = random.Random(piece)
    text = bytes(rng.choice(b'{}[]",:\\ab \\\\"') for _ in range(40_000))
    lexer = jsonlex.Lexer()
    got: list[tuple[int, int, bool]] = []
    for i in range(0, len(text), piece):
        for _, _, before, after, outside in lexer.feed(text[i:i + piece]):
            got.extend(zip(before.tolist(), after.tolist(), outside.tolist(), strict=True))
    assert got == _lexed_byte_by_byte(text)


# -- a decoder's failure told apart without reading its message -------------------------


def test_a_quirk_in_the_chunk_where_the_array_closes_before_an_object_is_repaired() -> None:
    """The array's ']' and a '},' after it (an object in a later field) in the chunk of
    a control character: the chunk is cut at the ']' and repaired, not refused."""
    event = b'{"ph":"X","cat":"cpu_op","name":"bad\x01name","pid":1,"tid":1,"ts":1,"dur":1}'
    got = convert(text(event, tail=b', "distributedInfo": {"rank": 0}, "traceName": "x"'))
    assert got.code == 0, got.err
    assert column(got.table, "name") == ["bad\x01name"]
    assert trace_field(got.table)["distributedInfo"] == {"rank": 0}


def test_the_decoders_position_is_read_from_its_message_or_not_at_all() -> None:
    assert jsonstream.decode_error_position(
        ValueError("JSON is malformed: expected ':' (byte 12)")) == (
        "JSON is malformed: expected ':'", 12)
    assert jsonstream.decode_error_position(ValueError("worded otherwise at 12")) == (
        "worded otherwise at 12", None)


#: Cuts that fall inside a string, inside a nested value, at a lone surrogate, in a
#: chunk with quirks to repair, and before an object after the array.
AWKWARD = text(
    *[json.dumps({**EVENT, "name": f"a}},{{b {i}", "args": {"x": {"y": [i, {"z": i}]}}})
      .encode() for i in range(40)],
    rb'{"ph":"X","name":"end\ud800","ts":1,"dur":1,"pid":1,"tid":1}',
    b'{"ph":"X","name":"ctl\x01","ts":1,"dur":1,"pid":NaN,"tid":1}',
    tail=b', "distributedInfo": {"rank": 0}, "traceName": "x}, {"')


@pytest.mark.parametrize("block", [64, 200, 4096])
def test_cuts_are_found_when_the_decoder_gives_no_position(
        monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Were msgspec's messages worded otherwise (no "(byte N)"), every cut is still told
    apart by our lexer: the same table, and bad text still refused in one line."""
    want = convert(AWKWARD)
    assert want.code == 0, want.err
    monkeypatch.setattr(jsonstream, "BLOCK", block)
    assert convert(AWKWARD).table == want.table
    monkeypatch.setattr(jsonstream, "decode_error_position", lambda err: (str(err), None))
    assert convert(AWKWARD).table == want.table
    bad = convert(AWKWARD.replace(b'"name": "a},{b 7"', b'"name": "a},{b 7" "'))
    assert bad.code == 2 and "invalid JSON in the events starting at byte" in bad.err, bad.err
