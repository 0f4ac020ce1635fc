"""The Kineto reader: quirks convert with a counted warning, never a crash or a lost event."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

import neurontrace
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers import detect
from neurontrace.readers.units import microseconds_to_ns

from support import KINETO, reference_ns


def events(name: str) -> pl.DataFrame:
    df = pl.from_arrow(neurontrace.load(KINETO / name))
    assert isinstance(df, pl.DataFrame)
    return df


def warnings(name: str) -> dict[str, int]:
    diag = Diagnostics()
    neurontrace.load(KINETO / name, diag=diag)
    return dict(diag.counts)


def test_gzip_and_plain_give_the_same_rows() -> None:
    assert events("nested-ops.json").equals(events("nested-ops.json.gz"))


def test_row_order_of_the_file_does_not_change_nesting() -> None:
    # (the unsorted copy has no baseTimeNanoseconds: compare times from the first event)
    rel = pl.col("start_ns") - pl.col("start_ns").min()
    a = events("nested-ops.json").with_columns(rel).sort("start_ns", "name")
    b = events("unsorted-events.json").with_columns(rel).sort("start_ns", "name")
    cols = ["name", "start_ns", "dur_ns", "self_ns", "depth", "step"]
    assert a.select(cols).equals(b.select(cols))
    parent_a = a.join(a.select(parent="row", pname="name"), on="parent", how="left")["pname"]
    parent_b = b.join(b.select(parent="row", pname="name"), on="parent", how="left")["pname"]
    assert parent_a.equals(parent_b)


def test_base_time_makes_times_epoch_based() -> None:
    df = events("nested-ops.json")
    step = df.filter(pl.col("name") == "ProfilerStep#7").row(0, named=True)
    assert step["start_ns"] == 1_700_000_000_000_000_000 + 10_000
    assert step["dur_ns"] == 100_000


def test_epoch_sized_microseconds_are_exact() -> None:
    df = events("epoch-microseconds.json")
    assert df["start_ns"].to_list() == [1695835542513910123, 1695835542513920999, -5500, 42000]
    assert df["dur_ns"].to_list() == [7001, 1, 1250, 3000]


def test_control_characters_are_kept() -> None:
    df = events("control-characters.json")
    assert df["name"][1] == "bad\x01name\x1b[0m"
    assert json.loads(df["args"][1]) == {"note": "tab\there"}
    assert warnings("control-characters.json") == {"control_characters": 2}


def test_bare_na_becomes_a_string() -> None:
    args = json.loads(events("bare-na.json")["args"][1])
    assert args["Input Dims"] == "N/A" and args["ratio"] == "nan"
    assert warnings("bare-na.json") == {"bare_words": 2}


def test_integers_wider_than_64_bits_stay_exact() -> None:
    df = events("huge-integers.json")
    args = df["args"][1]
    assert "340282366920938463463374607431768211455" in args
    assert json.loads(args)["Process Group ID"] == 2**64
    assert df["flow_ids"][1].to_list() == ["fwdbwd:123456789012345678901234567890"]


def test_invalid_utf8_is_replaced_and_counted() -> None:
    df = events("invalid-utf8.json")
    assert "\ufffd" in df["args"][1]
    assert warnings("invalid-utf8.json")["invalid_utf8"] >= 1
    assert df.height == 2


def test_string_pid_tid_become_null_ids_with_readable_tracks() -> None:
    df = events("string-pid-tid.json")
    spans = df.filter(pl.col("name") == "PyTorch Profiler (0)").row(0, named=True)
    assert spans["pid"] is None and spans["tid"] is None
    assert spans["track"] == "Spans / PyTorch Profiler"
    assert df.filter(pl.col("name") == "aten::empty")["track"][0] == "(empty) / (empty)"


def test_missing_cat_and_dur() -> None:
    df = events("missing-cat-and-dur.json")
    assert df.height == 3
    assert df["category"][1] is None and df["layer"][1] == "framework"
    assert df["dur_ns"][2] == 0
    assert warnings("missing-cat-and-dur.json") == {"missing_cat": 1, "missing_dur": 1}


def test_negative_duration_is_clamped_with_a_warning() -> None:
    df = events("negative-duration.json")
    assert df["dur_ns"].to_list() == [1000, 0, 18446744073709551]
    assert warnings("negative-duration.json") == {"negative_dur": 1}


def test_a_span_that_would_end_past_the_int64_range_is_cut_to_end_there(tmp_path: Path
                                                                         ) -> None:
    f = tmp_path / "far.json"
    f.write_text('{"traceEvents": ['
                 '{"ph": "X", "cat": "cpu_op", "name": "far", "pid": 1, "tid": 1,'
                 ' "ts": 9223372036854770.000, "dur": 100},'
                 '{"ph": "X", "cat": "cpu_op", "name": "near", "pid": 1, "tid": 1,'
                 ' "ts": 1, "dur": 2}]}')
    diag = Diagnostics()
    df = pl.from_arrow(neurontrace.load(f, diag=diag)).sort("start_ns")
    assert df["dur_ns"].to_list() == [2000, 2**63 - 1 - 9223372036854770000]
    assert dict(diag.counts) == {"end_out_of_range": 1}
    assert "event #0 after byte 17 'far' would end past the 64-bit range" in diag.lines()[1]


def test_bare_array_format() -> None:
    assert events("bare-array.json")["name"].to_list() == [
        "ProfilerStep#7", "aten::linear", "aten::t"
    ]


def test_empty_trace_gives_an_empty_table() -> None:
    df = events("empty-events.json")
    assert df.height == 0
    assert df.columns == list(neurontrace.SCHEMA.names)


def test_cuda_launch_chain_links_layers() -> None:
    df = events("cuda-launch-chain.json")
    by = {r["name"]: r for r in df.iter_rows(named=True)}
    assert by["cudaLaunchKernel"]["layer"] == "runtime"
    assert by["mul_kernel"]["layer"] == "device"
    assert by["mul_kernel"]["track"] == "GPU 0 / stream 7"
    assert by["mul_kernel"]["framework_row"] == by["aten::mul"]["row"]
    assert by["mul_kernel"]["flow_ids"] == ["ac2g:10"]
    assert by["cudaLaunchKernel"]["flow_ids"] == ["ac2g:10"]
    # string-typed args ("0x0", "2560") become numbers
    assert by["hipMemcpyWithStream"]["stream"] == 0
    assert by["hipMemcpyWithStream"]["bytes"] == 2560
    assert by["orphan_kernel"]["framework_row"] is None
    assert set(df["rank"]) == {3}  # from distributedInfo


def test_detection_by_content_without_the_file_name(tmp_path: Path) -> None:
    odd = tmp_path / "capture.bin"
    odd.write_bytes((KINETO / "nested-ops.json").read_bytes())
    assert detect(odd).name == "kineto"
    gz = tmp_path / "capture"
    gz.write_bytes(gzip.compress((KINETO / "nested-ops.json").read_bytes()))
    assert detect(gz).name == "kineto"


def test_rank_from_file_name(tmp_path: Path) -> None:
    f = tmp_path / "trace_rank_5.json"
    f.write_bytes((KINETO / "nested-ops.json").read_bytes())
    assert set(pl.from_arrow(neurontrace.load(f))["rank"]) == {5}


def test_a_cut_inside_a_string_or_nested_object_is_extended(tmp_path: Path) -> None:
    """Chunk boundaries fall after '},': one inside a string or a nested object must not
    break decoding."""
    from neurontrace.readers import jsonstream

    evs = [
        {"ph": "X", "cat": "cpu_op", "name": "a}, {b" * 50, "pid": 1, "tid": 1, "ts": i,
         "dur": 1, "args": {"x": "}, {" * 20, "nested": {"y": {"z": 1}, "w": [{"v": 2}, 3]},
                            "after": 4}}
        for i in range(2000)
    ]
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": evs, "after": [{"a": 1}, {"b": 2}]}))
    old = jsonstream.BLOCK
    try:
        jsonstream.BLOCK = 4096  # many small chunks
        df = pl.from_arrow(neurontrace.load(f))
    finally:
        jsonstream.BLOCK = old
    assert df.height == 2000
    assert df["name"].to_list() == [e["name"] for e in evs]
    meta = neurontrace.load(f).schema.metadata[b"neurontrace.trace"]
    assert json.loads(meta) == {"after": [{"a": 1}, {"b": 2}]}


@pytest.mark.parametrize(
    "name, message",
    [
        ("truncated.json", "truncated"),
        ("not-a-trace.json", "not a format neurontrace reads"),
    ],
)
def test_refused_inputs(name: str, message: str) -> None:
    with pytest.raises(BadInput, match=message) as e:
        neurontrace.load(KINETO / name)
    assert name in str(e.value) and "\n" not in str(e.value)


def test_truncated_gzip_is_refused(tmp_path: Path) -> None:
    data = gzip.compress((KINETO / "nested-ops.json").read_bytes())
    f = tmp_path / "cut.json.gz"
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInput, match="cut.json.gz"):
        neurontrace.load(f)


def test_wrong_types_per_field_take_the_lenient_path(tmp_path: Path) -> None:
    f = tmp_path / "types.json"
    f.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": ["list"], "name": 7, "pid": [1], "tid": {"a": 1}, "ts": "2.5",
         "dur": 1, "args": [1, 2]},
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 1, "dur": 1},
        5,
        {"ph": "B", "cat": "cpu_op", "name": "begin", "pid": 1, "tid": 1, "ts": 3},
    ]}))
    diag = Diagnostics()
    df = pl.from_arrow(neurontrace.load(f, diag=diag))
    assert df.height == 5  # nothing dropped
    assert df["start_ns"].to_list()[:2] == [1000, 2500]
    assert {"bad_id", "non_string", "not_an_object", "unknown_phase"} <= set(diag.counts)
    assert df.filter(pl.col("name") == "begin")["kind"].to_list() == ["instant"]


# Times as the profiler writes them: CUDA traces of older Kineto write epoch microseconds
# with one decimal (``1661203465989924.0``) and integer durations; the fast path must
# give what the standard library's decimal arithmetic gives (support.reference_ns), for
# any 0 to 3 decimals.
_PLACES = st.integers(min_value=0, max_value=3)


@given(st.lists(st.tuples(st.integers(min_value=-(10**19), max_value=10**19), _PLACES),
                min_size=1, max_size=40))
def test_times_with_up_to_three_decimals_convert_exactly(values: list[tuple[int, int]]
                                                         ) -> None:
    texts = []
    for v, places in values:
        sign, digits = ("-" if v < 0 else ""), str(abs(v))
        if places:
            digits = digits.rjust(places + 1, "0")
            digits = f"{digits[:-places]}.{digits[-places:]}"
        texts.append(f"{sign}{digits}".encode())
    out, rounded = microseconds_to_ns(texts)
    assert out.to_pylist() == [reference_ns(t.decode())[0] for t in texts]
    assert rounded == []


def test_epoch_microseconds_with_one_decimal_and_integer_durations() -> None:
    out, _ = microseconds_to_ns([b"1661203465989924.0", b"4", b"0", b"-2.5"])
    assert out.to_pylist() == [1661203465989924000, 4000, 0, -2500]


@pytest.mark.parametrize("text", ["+1", "0x1", "1e3", "-", "", "1-2", "--1", "1.2345"])
def test_a_time_of_another_shape_beside_a_plain_one_converts_as_the_reference_does(
        text: str) -> None:
    """Whichever path takes it (Arrow's decimal parse reads ``+1`` and ``1e3`` exactly;
    the others send the chunk the exact slow way), the value is the reference's."""
    out, _ = microseconds_to_ns([b"5.000", text.encode()])
    assert out.to_pylist() == [5000, reference_ns(text)[0]]
