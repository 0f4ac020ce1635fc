"""Warnings say what is abnormal: what every real trace has converts silently, quirks warn.

Kineto writes its own instants without a category in every trace ("Iteration Start:
PyTorch Profiler", "Iteration Start: __cupti_profiler__", "Record Window End"): their
category stays null without a ``missing_cat`` warning. Any other event without a category,
and every repair of a broken file, is still warned. Several traces are merged only as the
ranks of one run, and said (a note, not a warning); others are refused with the fix.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace.analyses import events
from neurontrace.cli.main import cli
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput

from support import FIXTURES, KINETO, corpus_dir

#: Warning codes that normal traces used to raise (see the module docstring):
#: ``external_id_not_a_link`` on the traces of older Kineto, whose runtime calls carry
#: their correlation as External id (linked by nesting and correlation, completely).
NORMAL_KINDS = {"missing_cat", "external_id_not_a_link"}

CORPUS = sorted(corpus_dir().glob("*.json*")) if corpus_dir() else []
CAPTURES = sorted((FIXTURES / "capture").glob("*/*/trace.json*"))


def warnings(path: Path) -> dict[str, int]:
    diag = Diagnostics()
    neurontrace.load(path, diag=diag)
    return dict(diag.counts)


def trace(tmp_path: Path, events: list[dict[str, object]]) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


@pytest.mark.skipif(not CORPUS, reason="NEURONTRACE_CORPUS is not set to a folder of traces")
@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_corpus_trace_raises_no_warning_of_a_normal_kind(path: Path) -> None:
    assert NORMAL_KINDS.isdisjoint(warnings(path))


@pytest.mark.parametrize("path", CAPTURES, ids=[str(p.parent.relative_to(FIXTURES))
                                                for p in CAPTURES])
def test_capture_fixture_raises_no_warning_of_a_normal_kind(path: Path) -> None:
    assert NORMAL_KINDS.isdisjoint(warnings(path))


def test_capture_fixtures_are_found() -> None:
    assert len(CAPTURES) >= 8


def test_kineto_markers_keep_a_null_category_silently(tmp_path: Path) -> None:
    path = trace(tmp_path, [
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
         "tid": "PyTorch Profiler", "ts": 1},
        {"ph": "i", "s": "g", "name": "Iteration Start: __cupti_profiler__", "pid": "Traces",
         "tid": "PyTorch Profiler", "ts": 2},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": 1, "tid": 1, "ts": 9},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 3,
         "dur": 1},
    ])
    diag = Diagnostics()
    df = pl.from_arrow(neurontrace.load(path, diag=diag))
    assert isinstance(df, pl.DataFrame)
    assert "missing_cat" not in diag.counts
    assert df.filter(pl.col("name").str.contains("Iteration|Record")) \
        .get_column("category").null_count() == 3


def test_other_events_without_a_category_still_warn(tmp_path: Path) -> None:
    path = trace(tmp_path, [
        {"ph": "X", "name": "Iteration Start: PyTorch Profiler", "pid": 1, "tid": 1, "ts": 1,
         "dur": 1},  # a span of that name is no Kineto marker
        {"ph": "i", "name": "my marker", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "i", "name": "Record Window End", "pid": 1, "tid": 1, "ts": 9},
    ])
    assert warnings(path).get("missing_cat") == 2


@pytest.mark.parametrize(("name", "code"), [
    ("control-characters.json", "control_characters"),
    ("bare-na.json", "bare_words"),
    ("invalid-utf8.json", "invalid_utf8"),
    ("missing-cat-and-dur.json", "missing_cat"),
    ("missing-cat-and-dur.json", "missing_dur"),
    ("negative-duration.json", "negative_dur"),
])
def test_quirk_fixture_still_warns(name: str, code: str) -> None:
    assert warnings(KINETO / name).get(code, 0) > 0


@pytest.mark.parametrize("path", CAPTURES, ids=[str(p.parent.relative_to(FIXTURES))
                                                for p in CAPTURES])
def test_a_normal_capture_raises_no_warning_at_all(path: Path) -> None:
    """Real captures of CPU and CUDA runs: the profiler's own synchronise at stop (a
    runtime call outside any op) is not an unlinked row."""
    assert warnings(path) == {}


def test_runtime_calls_outside_any_op_are_not_unlinked_but_device_work_is(
        tmp_path: Path) -> None:
    path = trace(tmp_path, [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 1,
         "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 1, "pid": 0, "tid": 7,
         "args": {"correlation": 99}},
    ])
    assert warnings(path) == {"unlinked": 1}  # the kernel; not the runtime call


def test_device_rows_no_launch_started_are_not_unlinked(tmp_path: Path) -> None:
    # Issue 16 item 6: cupti_profiler's 77 CUPTI ranges were 77 'unlinked' rows; a
    # profiler range on the device is not work a launch started.
    path = trace(tmp_path, [
        {"ph": "X", "cat": "cuda_profiler_range", "name": "range", "ts": 1, "dur": 9,
         "pid": 0, "tid": 7, "args": {"device": 0}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 1, "pid": 0, "tid": 7,
         "args": {"correlation": 99}},
    ])
    assert warnings(path) == {"unlinked": 1}  # the kernel only


# -- several traces: the ranks of one run are merged and said; others are refused ------

@pytest.mark.parametrize("study", ["cpu", "cuda"])
def test_a_capture_run_folder_of_variants_is_refused_with_the_compare_command(
        study: str) -> None:
    # Issue 16 item 5: `report runs/demo` added up its three variants ("15 steps").
    folder = FIXTURES / "capture" / study
    variants = sorted(p.parent for p in folder.glob("*/trace.json.gz"))
    assert [v.name for v in variants] == ["compiled", "naive", "rms_norm"]
    for command in ("report", "ops", "steps"):
        done = CliRunner().invoke(cli, [command, str(folder)])
        assert done.exit_code == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1
        assert f"{folder}: 3 traces that are not the ranks of one run (3 of them are " \
               "rank 0: " in done.stderr
        compare = "neurontrace compare " + " ".join(map(str, variants))
        assert done.stderr.rstrip().endswith(f"side by side ({compare})")
    done = CliRunner().invoke(cli, ["compare", *map(str, variants), "--json"])
    assert done.exit_code == 0  # the command the refusal names


def test_the_ranks_of_one_run_are_merged_and_the_command_says_so_after_its_output() -> None:
    run = FIXTURES / "neuron" / "run_two_ranks"
    diag = Diagnostics()
    lf = events(run, diag=diag)
    assert sorted(lf.select(pl.col("rank").unique()).collect().to_series()) == [0, 1]
    note = (f"{run}: 2 traces merged as the ranks of one run (ranks 0, 1): figures per op, "
            "kernel and copy add up their ranks; idle time is per rank and device")
    assert diag.notes == [note] and note not in diag.lines()  # a note, not a warning
    done = subprocess.run([sys.executable, "-m", "neurontrace.cli.main", "ops", str(run)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("op ")
    assert f"neurontrace: {note}\n" in done.stderr


def test_one_trace_or_one_rank_needs_no_note() -> None:
    diag = Diagnostics()
    events(FIXTURES / "capture" / "cuda" / "naive", diag=diag)
    assert diag.notes == []


def test_two_traces_of_one_rank_in_a_folder_are_refused(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.json").write_text(json.dumps({"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1,
             "ts": 0, "dur": 10}]}))
    with pytest.raises(BadInput, match=r"2 traces that are not the ranks of one run \(2 "
                       r"of them are rank 0: .*a\.json, .*b\.json\)"):
        events(tmp_path)


@pytest.mark.parametrize("study", ["cpu", "cuda"])
def test_converting_traces_that_share_a_rank_says_the_analyses_take_them_apart(
        study: str, tmp_path: Path) -> None:
    # Issue 16 item 5: convert put a capture's variants (or unrelated traces) in one
    # rank's folder without a word; the analyses refuse them together afterwards.
    folder = FIXTURES / "capture" / study
    done = CliRunner().invoke(cli, ["convert", str(folder), str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    assert "  note: 3 of 3 traces are rank=0 (trace-2.parquet, trace-3.parquet, " \
           "trace.parquet): not the ranks of one run, so the analyses take them one at " \
           "a time (report FILE) or side by side (compare A B), never added up\n" \
           in done.stderr
    one = CliRunner().invoke(cli, ["convert", str(FIXTURES / "neuron" / "run_two_ranks"),
                                   str(tmp_path / "ranks")])
    assert one.exit_code == 0 and "note:" not in one.stderr, one.output


OLDER_KINETO = ("critical_path", "cupti_profiler", "trace_diff")


@pytest.mark.skipif(not CORPUS, reason="NEURONTRACE_CORPUS is not set to a folder of traces")
@pytest.mark.parametrize("name", OLDER_KINETO)
def test_older_kineto_numbering_of_runtime_calls_is_normal_and_not_warned(name: str) -> None:
    # These traces give each runtime call its correlation as "External id" (not the id
    # of the op around it): how that Kineto wrote them, not a defect. No warning, and
    # nesting and correlation still link their device work to its op.
    path = next(p for p in CORPUS if p.name.startswith(name + "."))
    doc = json.loads(gzip.decompress(path.read_bytes()))
    calls = [e["args"] for e in doc["traceEvents"]
             if e.get("cat") == "cuda_runtime" and "External id" in e.get("args", {})]
    assert calls and all(a["External id"] == a["correlation"] for a in calls)
    diag = Diagnostics()
    lf = events(path, diag=diag)
    assert "external_id_not_a_link" not in diag.counts
    work = lf.filter(pl.col("layer") == "device", pl.col("role").is_in(["compute", "transfer"]))
    linked = work.select(pl.col("framework_row").is_not_null().mean()).collect().item()
    assert linked is None or linked > 0.99  # cupti_profiler has ranges only, no work


def test_a_converted_capture_run_folder_is_refused_naming_its_event_tables(
        tmp_path: Path) -> None:
    # What `neurontrace capture` leaves (each variant's trace and its events.parquet):
    # the folder is then a dataset of three rank-0 tables, refused like the traces.
    run = tmp_path / "demo"
    shutil.copytree(FIXTURES / "capture" / "cpu", run)
    tables = []
    for variant in ("compiled", "naive", "rms_norm"):
        tables.append(run / variant / "events.parquet")
        neurontrace.convert(run / variant / "trace.json.gz", tables[-1])
    done = CliRunner().invoke(cli, ["report", str(run)])
    assert done.exit_code == 2 and done.stderr.count("\n") == 1
    assert f"{run}: 3 traces that are not the ranks of one run (3 of them are rank 0: " \
           f"{tables[0]}, {tables[1]}, {tables[2]})" in done.stderr
    compare = "neurontrace compare " + " ".join(map(str, tables))
    assert done.stderr.rstrip().endswith(f"side by side ({compare})")
    assert CliRunner().invoke(cli, ["compare", *map(str, tables)]).exit_code == 0
