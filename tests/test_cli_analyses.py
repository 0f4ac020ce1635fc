"""The analysis commands: thin shells that accept a raw trace, a folder or our Parquet."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace.cli.main import COMMANDS, cli

ANALYSES = ["ops", "gaps", "copies", "steps", "report"]
README = Path(__file__).resolve().parent.parent / "README.md"


def kineto(path: Path, scale: int = 1) -> Path:
    """SYNTHETIC, CUDA-shaped Kineto trace (field names as in the corpus traces): two
    steps, each an aten::mul (kernel) and an aten::add whose Python scalar is copied
    to the device first."""
    ev: list[dict[str, Any]] = []
    for step in range(2):
        t = 1000.0 * step
        ext = 10 * step
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
             "tid": 1, "ts": t, "dur": 900.0, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1,
             "ts": t + 10, "dur": 100.0 * scale, "args": {"External id": ext + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 50, "dur": 10.0, "args": {"External id": ext + 1, "correlation": ext + 1}},
            {"ph": "X", "cat": "kernel", "name": "mul_kernel", "pid": 0, "tid": 7,
             "ts": t + 70, "dur": 200.0 * scale, "args": {"External id": ext + 1,
                                                         "correlation": ext + 1,
                                                         "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
             "ts": t + 300, "dur": 200.0, "args": {"External id": ext + 2}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1,
             "ts": t + 310, "dur": 100.0, "args": {"External id": ext + 3}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
             "ts": t + 320, "dur": 50.0, "args": {"External id": ext + 3, "correlation": ext + 3}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
             "pid": 0, "tid": 7, "ts": t + 360, "dur": 2.0,
             "args": {"External id": ext + 3, "correlation": ext + 3, "bytes": 4,
                      "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 450, "dur": 10.0, "args": {"External id": ext + 2, "correlation": ext + 2}},
            {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7,
             "ts": t + 470, "dur": 100.0, "args": {"External id": ext + 2,
                                                  "correlation": ext + 2,
                                                  "device": 0, "stream": 7}},
        ]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def run(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args))
    return result


def as_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return kineto(tmp_path / "run.json")


def test_ops_json_fields_largest_first(trace: Path) -> None:
    got = as_json("ops", str(trace), "--layer", "device")
    assert [set(o) for o in got] == [{"name", "calls", "self_ns", "total_ns", "share"}] * 3
    assert [(o["name"], o["calls"], o["self_ns"]) for o in got] == [
        ("aten::mul", 2, 400_000), ("aten::add", 2, 200_000), ("aten::copy_", 2, 4_000)
    ]


def test_gaps_json_fields(trace: Path) -> None:
    got = as_json("gaps", str(trace))
    assert set(got) == {"devices", "tracks", "device_gaps", "gaps"}
    assert {"track", "span_ns", "busy_ns", "idle_ns", "gaps"} <= set(got["tracks"][0])
    assert {"track", "start_ns", "dur_ns", "cause", "before", "after"} <= set(got["gaps"][0])


def test_copies_json_fields(trace: Path) -> None:
    got = as_json("copies", str(trace))
    assert len(got) == 2
    fields = {"start_ns", "dur_ns", "bytes", "direction", "op", "via", "tiny", "layers"}
    assert fields <= set(got[0])
    assert (got[0]["op"], got[0]["via"], got[0]["direction"], got[0]["tiny"]) == (
        "aten::add", "aten::copy_", "h2d", True)


def test_raw_trace_folder_and_parquet_give_the_same_answers(trace: Path, tmp_path: Path) -> None:
    parquet = tmp_path / "run.parquet"
    neurontrace.convert(trace, parquet)
    folder = tmp_path / "folder"
    folder.mkdir()
    kineto(folder / "only.json")
    for cmd in ANALYSES:
        raw = as_json(cmd, str(trace))
        assert as_json(cmd, str(parquet)) == raw, cmd
        assert as_json(cmd, str(folder)) == raw, cmd


def test_tables_render(trace: Path) -> None:
    for cmd in ANALYSES:
        result = run(cmd, str(trace))
        assert result.exit_code == 0, result.output
        assert result.output.strip()
    words = run("report", str(trace)).output
    assert "aten::mul: 66.2% of device time, 1 launch per step" in words  # 400 of 604 µs
    assert "aten::add: 1 h2d copy per step, 8 B, all tiny" in words


def test_compare_gives_ratios_to_the_first_run(tmp_path: Path) -> None:
    a = kineto(tmp_path / "naive.json")
    b = kineto(tmp_path / "fused.json", scale=2)
    got = as_json("compare", str(a), str(b))["metrics"]
    rows = {(r["metric"], r["run"]): r for r in got}
    assert rows[("launches", "fused")]["ratio"] == 1.0
    assert rows[("op:aten::mul", "fused")]["value"] == 800_000
    assert rows[("op:aten::mul", "fused")]["ratio"] == 2.0
    assert run("compare", str(a), str(b)).exit_code == 0


def test_missing_input_is_a_one_line_error_exit_2(tmp_path: Path) -> None:
    for cmd in ANALYSES:
        result = run(cmd, str(tmp_path / "nope.json"))
        assert result.exit_code == 2
        assert result.stderr.strip().count("\n") == 0
        assert "nope.json" in result.stderr


def test_a_file_that_is_not_a_trace_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    result = run("ops", str(bad))
    assert result.exit_code == 2 and "notes.txt" in result.stderr


def test_every_command_has_help_and_a_readme_section() -> None:
    text = README.read_text()
    for name in COMMANDS:
        assert run(name, "--help").exit_code == 0
        assert re.search(rf"^### `neurontrace {name}\b", text, re.M), f"README lacks {name}"


def test_report_on_profiler_ranges_only_says_they_are_not_device_work(tmp_path: Path) -> None:
    path = tmp_path / "ranges.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 0,
         "dur": 100, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10, "dur": 5, "args": {"External id": 1, "correlation": 1}},
        {"ph": "X", "cat": "cuda_profiler_range", "name": "conv_kernel", "pid": 0, "tid": 1,
         "ts": 20, "dur": 30, "args": {"device": 0}},
        {"ph": "X", "cat": "cuda_profiler_range", "name": "conv_kernel", "pid": 0, "tid": 1,
         "ts": 60, "dur": 30, "args": {"device": 0}},
    ]}))
    result = run("report", str(path))
    assert result.exit_code == 0, result.output
    assert "host only" not in result.output
    assert ("No device work in this trace: its device rows are 2 CUPTI profiler range(s) "
            "(counters measured over a range), not kernels or copies.") in result.output
    assert "1 runtime call(s) on the host; the device side of their launches" in result.output
    doc = as_json("report", str(path))
    assert doc["device_rows"] == [
        {"role": "other", "category": "cuda_profiler_range", "rows": 2}]
    assert doc["runtime_calls"] == 1


def test_report_without_device_rows_says_host_only(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 0,
         "dur": 100, "args": {"External id": 1}}]}))
    result = run("report", str(path))
    assert "No device work in this trace (host only)." in result.output
    assert as_json("report", str(path))["device_rows"] == []


CORPUS = Path(os.environ.get("NEURONTRACE_CORPUS") or "/nonexistent")
CUPTI = next(iter(sorted(CORPUS.glob("cupti_profiler*"))), None) if CORPUS.is_dir() else None


@pytest.mark.skipif(CUPTI is None, reason="NEURONTRACE_CORPUS lacks cupti_profiler*")
def test_report_on_the_corpus_cupti_profiler_trace_counts_its_ranges() -> None:
    """The corpus CUPTI profiler trace: its device rows are profiler ranges only (counted
    here from the raw JSON), and its host made runtime calls."""
    assert CUPTI is not None
    raw = CUPTI.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "I", "C")]
    ranges = sum(e.get("cat") == "cuda_profiler_range" for e in events)
    work = sum(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in events)
    assert ranges and not work
    result = run("report", str(CUPTI))
    assert result.exit_code == 0, result.output
    assert "host only" not in result.output
    assert (f"its device rows are {ranges:,} CUPTI profiler range(s) (counters measured "
            "over a range), not kernels or copies.") in result.output


def test_json_prints_every_row_unless_top_is_given() -> None:
    """Machine output is complete: the --top default cuts tables for people, not --json."""
    trace = str(Path(__file__).parents[1] / "fixtures" / "kineto" / "cpu-mlp-training.json.gz")

    def rows(*args: str) -> object:
        r = CliRunner().invoke(cli, [*args, trace, "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    every = rows("ops", "--top", "0")
    assert isinstance(every, list) and len(every) > 20  # more than the default --top 20
    assert rows("ops") == every
    assert len(rows("ops", "--top", "3")) == 3  # type: ignore[arg-type]
    report = rows("report")
    assert isinstance(report, dict) and report["host_ops"] == rows("report", "--top", "0")[
        "host_ops"]  # type: ignore[index]
    assert len(report["host_ops"]) == len(every)
    assert len(rows("report", "--top", "2")["host_ops"]) == 2  # type: ignore[index]
