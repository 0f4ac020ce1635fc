"""Properties: any trace we can write, we read back exactly; Parquet changes nothing."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import neurontrace

names = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]), min_size=0, max_size=12
)
ns = st.integers(min_value=0, max_value=10**16)
arg_values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=8),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=3),
)
event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "i", "C"]),
        "cat": st.sampled_from(["cpu_op", "user_annotation", "kernel", "cuda_runtime"]),
        "name": names,
        "pid": st.integers(0, 3),
        "tid": st.integers(0, 3),
        "ts": ns,
        "dur": st.integers(0, 10**7),
        "args": st.dictionaries(st.text(min_size=1, max_size=6), arg_values, max_size=4),
    }
)


def us(v: int) -> str:
    return f"{v // 1000}.{v % 1000:03d}"


def write_trace(events: list[dict], path: Path) -> None:
    parts = []
    for e in events:
        body = {k: v for k, v in e.items() if k not in ("ts", "dur")}
        text = json.dumps(body)[:-1]
        text += f', "ts": {us(e["ts"])}'
        if e["ph"] == "X":
            text += f', "dur": {us(e["dur"])}'
        parts.append(text + "}")
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(parts) + "\n]}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, max_size=40))
def test_every_event_comes_back_exactly(events: list[dict]) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.json"
        write_trace(events, src)
        out = Path(d) / "t.parquet"
        neurontrace.convert(src, out)
        df = neurontrace.scan(out).collect()
        # Parquet round trip: reading the file gives what load() builds in memory
        mem = pl.from_arrow(neurontrace.load(src))
        assert isinstance(mem, pl.DataFrame)
        assert df.equals(mem)
    assert df.height == len(events)
    kinds = {"X": "span", "i": "instant", "C": "counter"}
    for e, r in zip(events, df.iter_rows(named=True), strict=True):
        assert r["name"] == e["name"]
        assert r["kind"] == kinds[e["ph"]]
        assert r["start_ns"] == e["ts"]
        assert r["dur_ns"] == (e["dur"] if e["ph"] == "X" else 0)
        assert r["category"] == e["cat"]
        assert json.loads(r["args"]) == e["args"]
        if r["kind"] == "span":
            assert 0 <= r["self_ns"] <= r["dur_ns"]


def test_parquet_file_reads_back_identical(tmp_path: Path) -> None:
    from support import KINETO

    out = tmp_path / "o.parquet"
    neurontrace.convert(KINETO / "cpu-mlp-training.json.gz", out)
    table = neurontrace.read(out)
    assert table.schema.remove_metadata() == neurontrace.SCHEMA
    again = tmp_path / "again.parquet"
    pq.write_table(table, again)
    assert pq.read_table(again).equals(table)
