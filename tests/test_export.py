"""`neurontrace export`: a Chrome trace that viewers open and that reads back unchanged."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neurontrace import analyses
from neurontrace import schema as S
from neurontrace.cli.main import cli
from neurontrace.convert import load
from neurontrace.views import chrome

from support import FIXTURES, KINETO

NAIVE = FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz"
EPS = FIXTURES / "capture" / "cuda-eps-copy" / "eps_copied" / "trace.json.gz"

#: Every column round-trips; none is left out (see views.chrome's module doc).
ROUND_TRIP = S.NAMES


def exported(table: pl.DataFrame, tmp: Path, marks: bool = True) -> Path:
    out = tmp / "timeline.json"
    lf = table.lazy()  # the marks are computed by the caller, as `neurontrace export` does
    chrome.export(lf, out, marks=chrome.Marks(analyses.gaps(lf).gaps, analyses.copies(lf))
                  if marks else None)
    return out


def assert_same(before: pl.DataFrame, after: pl.DataFrame) -> None:
    assert after.height == before.height
    for c in ROUND_TRIP:
        a, b = before.get_column(c), after.get_column(c)
        assert a.cast(b.dtype).to_list() == b.to_list(), c


def events_of(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ns"
    evs: list[dict[str, Any]] = doc["traceEvents"]
    return evs


@pytest.mark.parametrize("src", [
    NAIVE, EPS, KINETO / "huge-integers.json", KINETO / "string-pid-tid.json",
    KINETO / "control-characters.json", KINETO / "invalid-utf8.json",
    FIXTURES / "neuron" / "run_two_ranks", FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0",
], ids=lambda p: p.name if p.name != "trace.json.gz" else p.parent.name)
def test_reading_an_export_gives_back_every_column_of_every_row(src: Path,
                                                                tmp_path: Path) -> None:
    before = analyses.events(src).collect()
    after = pl.from_arrow(load(exported(before, tmp_path)))
    assert isinstance(after, pl.DataFrame)
    assert_same(before, after)


def test_every_event_appears_once_with_exact_microsecond_times(tmp_path: Path) -> None:
    before = analyses.events(NAIVE).collect()
    out = exported(before, tmp_path)
    evs = events_of(out)
    rows = [e for e in evs if e["ph"] in "XiC" and e.get("cat") != chrome.VIEW_CATEGORY]
    assert sorted(e["args"]["neurontrace"][S.ROW] for e in rows) == list(range(before.height))
    # three decimals, always: ts and dur are exact nanoseconds
    assert re.findall(rb'"(?:ts|dur)":(-?\d+(?:\.\d*)?)', out.read_bytes())
    assert not re.search(rb'"(?:ts|dur)":(?!-?\d+\.\d{3}[,}])', out.read_bytes())
    base = json.loads(out.read_text())["baseTimeNanoseconds"]
    by_row = {e["args"]["neurontrace"][S.ROW]: e for e in rows}
    for row, start in before.select(S.ROW, S.START_NS).iter_rows():
        assert round(by_row[row]["ts"] * 1000) == start - base


def test_processes_per_host_process_and_device_threads_per_lane(tmp_path: Path) -> None:
    evs = events_of(exported(analyses.events(NAIVE).collect(), tmp_path))
    processes = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert "rank 0 · process 452" in processes.values()
    assert "rank 0 · GPU 0" in processes.values()
    assert "neurontrace · device idle" in processes.values()
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    gpu = next(p for p, n in processes.items() if n == "rank 0 · GPU 0")
    assert [n for (p, _), n in threads.items() if p == gpu] == ["stream 7"]
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    assert kernels and all(e["pid"] == gpu for e in kernels)


def test_arrows_run_from_op_to_runtime_call_to_kernel(tmp_path: Path) -> None:
    before = analyses.events(NAIVE).collect()
    evs = events_of(exported(before, tmp_path))
    rows = {e["args"]["neurontrace"][S.ROW]: e for e in evs
            if e["ph"] == "X" and "neurontrace" in e["args"]}
    starts = {e["id"]: e for e in evs if e["ph"] == "s"}
    ends = {e["id"]: e for e in evs if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) > 0
    assert all(e["bp"] == "e" for e in ends.values())
    kinds = set()
    for flow_id, s in starts.items():
        f = ends[flow_id]
        target = rows[flow_id]  # the arrow's id is its target's row
        assert (f["pid"], f["tid"], f["ts"]) == (target["pid"], target["tid"], target["ts"])
        # the start sits inside a slice on its lane: the viewer binds it there
        source = [e for e in rows.values() if (e["pid"], e["tid"]) == (s["pid"], s["tid"])
                  and e["ts"] <= s["ts"] < e["ts"] + max(e["dur"], 0.001)]
        assert source, s
        kinds.add((min(source, key=lambda e: e["dur"])["args"]["neurontrace"][S.LAYER],
                   target["args"]["neurontrace"][S.LAYER]))
    assert {(S.FRAMEWORK, S.RUNTIME), (S.RUNTIME, S.DEVICE)} <= kinds


def test_gap_and_copy_marks_are_shown_but_not_read_back_as_rows(tmp_path: Path) -> None:
    before = analyses.events(EPS).collect()
    out = exported(before, tmp_path)
    marks = [e for e in events_of(out) if e.get("cat") == chrome.VIEW_CATEGORY]
    causes = {e["args"]["cause"] for e in marks if e["args"][chrome.VIEW_KEY] == "gap"}
    copies = [e for e in marks if e["args"][chrome.VIEW_KEY] == "copy"]
    assert causes and causes <= {"h2d_copy", "sync", "launch_latency", "host_dispatch",
                                 "unknown"}
    assert len(copies) == analyses.copies(before.lazy()).height > 0
    assert load(out).num_rows == before.height


def test_the_command_writes_the_file_atomically(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = CliRunner().invoke(cli, ["export", str(NAIVE), str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rows"] == load(out).num_rows
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]
    bad = CliRunner().invoke(cli, ["export", str(KINETO / "truncated.json"), str(out)])
    assert bad.exit_code == 2 and "truncated" in bad.output
    assert load(out).num_rows > 0  # the earlier export is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


# -- property: any table survives export and reading back -------------------------------

I64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def tables(draw: st.DrawFn) -> pl.DataFrame:
    n = draw(st.integers(0, 8))
    rows = []
    for i in range(n):
        kind = draw(st.sampled_from(S.KINDS))
        opt = lambda s: draw(st.none() | s)  # noqa: E731
        rows.append({
            S.ROW: i, S.LAYER: draw(st.sampled_from(S.LAYERS)), S.CATEGORY: opt(text),
            S.NAME: draw(text), S.KIND: kind, S.START_NS: draw(st.integers(0, 2**60)),
            S.DUR_NS: draw(st.integers(0, 2**40)) if kind == S.SPAN else 0,
            S.SELF_NS: opt(I64), S.PARENT: opt(I64), S.DEPTH: opt(I64), S.PID: opt(I64),
            S.TID: opt(I64), S.TRACK: draw(text), S.DEVICE_COL: opt(I64),
            S.STREAM: opt(I64), S.EXTERNAL_ID: opt(I64), S.CORRELATION: opt(I64),
            S.FLOW_IDS: opt(st.lists(text, max_size=3)),
            S.FRAMEWORK_ROW: opt(st.integers(0, max(n - 1, 0))), S.LINK: opt(text),
            S.BYTES: opt(I64), S.STEP: opt(I64), S.RANK: draw(st.integers(0, 3)),
            S.INSTANCE_ID: opt(text), S.EXECUTION: opt(text),
            S.ARGS: opt(json_values.map(json.dumps)),
        })
    table = pa.Table.from_pylist(rows, schema=S.SCHEMA)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_any_table_reads_back_exactly(table: pl.DataFrame) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        after = pl.from_arrow(load(exported(table, Path(tmp))))
    assert isinstance(after, pl.DataFrame)
    assert_same(table, after)
