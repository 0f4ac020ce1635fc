"""compare's headline (the median step time), its host-only runs, and copies --top."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_cli_analyses import kineto

from neurontrace.cli.main import cli

CAPTURE = Path(__file__).resolve().parent.parent / "fixtures" / "capture"
VARIANTS = ("naive", "rms_norm", "compiled")
DEVICE_ROWS = {"device_ns", "device_busy_ns", "idle_ns", "launches", "copies", "copy_bytes",
               "tiny_copies"}


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def as_json(*args: str) -> Any:
    return json.loads(invoke(*args, "--json"))


def traces(device: str) -> list[str]:
    return [str(CAPTURE / device / v / "trace.json.gz") for v in VARIANTS]


def raw_median_step_ns(path: str) -> int:
    """From the raw JSON alone: the host's ProfilerStep#N spans (not the GPU's copies of
    them, cat gpu_user_annotation), their durations in ns, the median rounded down."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    durs = [round(e["dur"] * 1000) for e in events
            if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))
            and e.get("cat") != "gpu_user_annotation"]
    assert durs
    return int(statistics.median(durs))


def by_metric(rows: list[dict[str, Any]], metric: str) -> list[Any]:
    return [r["value"] for r in rows if r["metric"] == metric]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compare_headline_is_the_median_step_time_from_the_raw_json(device: str) -> None:
    paths = traces(device)
    rows = as_json("compare", *paths)["metrics"]
    assert rows[0]["metric"] == "step_ns"
    want = [raw_median_step_ns(p) for p in paths]
    assert by_metric(rows, "step_ns") == want
    ratios = [r["ratio"] for r in rows if r["metric"] == "step_ns"]
    assert ratios == pytest.approx([1.0, want[1] / want[0], want[2] / want[0]])
    walls = by_metric(rows, "wall_ns")
    assert all(w > s for w, s in zip(walls, want, strict=True))  # the detail stays
    text = invoke("compare", *paths)
    assert "step_ns (median step)" in text and "wall_ns (whole trace)" in text


def test_compare_of_cpu_runs_leaves_the_device_rows_out_and_says_host_only_once() -> None:
    rows = as_json("compare", *traces("cpu"))["metrics"]
    assert not DEVICE_ROWS & {r["metric"] for r in rows}
    text = invoke("compare", *traces("cpu"))
    assert text.count("host only") == 1
    assert not any(m in text for m in DEVICE_ROWS)


def test_compare_of_cuda_runs_keeps_the_device_rows() -> None:
    rows = as_json("compare", *traces("cuda"))["metrics"]
    assert DEVICE_ROWS <= {r["metric"] for r in rows}
    assert all(v > 0 for v in by_metric(rows, "device_ns"))
    assert "host only" not in invoke("compare", *traces("cuda"))


def test_a_run_without_steps_falls_back_to_wall_time_labelled(tmp_path: Path) -> None:
    stepped = kineto(tmp_path / "stepped.json")
    doc = json.loads(stepped.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not e["name"].startswith("ProfilerStep#")]
    stepless = tmp_path / "stepless.json"
    stepless.write_text(json.dumps(doc))
    rows = as_json("compare", str(stepped), str(stepless))["metrics"]
    step = {r["run"]: r for r in rows if r["metric"] == "step_ns"}
    assert step["stepped"]["value"] == 900_000  # both synthetic steps last 900 us
    assert step["stepless"]["value"] is None and step["stepless"]["ratio"] is None
    wall = {r["run"]: r["value"] for r in rows if r["metric"] == "wall_ns"}
    text = invoke("compare", str(stepped), str(stepless))
    assert f"wall {wall['stepless'] / 1e6:.2f} ms (no steps)" in text
    assert "no ProfilerStep#N spans in stepless" in text


SIZES = (4, 4096, 16, 1024, 4096, 64)


def copy_trace(path: Path) -> Path:
    """SYNTHETIC, CUDA-shaped: one host-to-device copy (a cudaMemcpyAsync and its
    gpu_memcpy) every 100 us, of SIZES bytes in that order."""
    ev: list[dict[str, Any]] = []
    for i, size in enumerate(SIZES):
        t = 100.0 * i
        ev += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1,
             "ts": t, "dur": 50.0, "args": {"External id": i + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
             "ts": t + 10, "dur": 20.0, "args": {"External id": i + 1, "correlation": i + 1}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
             "pid": 0, "tid": 7, "ts": t + 40, "dur": 2.0,
             "args": {"External id": i + 1, "correlation": i + 1, "bytes": size,
                      "device": 0, "stream": 7}},
        ]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_copies_top_n_gives_the_n_largest_by_bytes_then_time(tmp_path: Path) -> None:
    trace = str(copy_trace(tmp_path / "copies.json"))
    every = as_json("copies", trace)
    assert [r["bytes"] for r in every] == list(SIZES)  # every row, in time order
    top = as_json("copies", trace, "--top", "3")
    assert [r["bytes"] for r in top] == [4096, 4096, 1024]
    assert top[0]["start_ns"] < top[1]["start_ns"]  # equal sizes: the earlier first
    text = invoke("copies", trace, "--top", "3")
    assert "Transfers (largest 3 of 6 by bytes, then time" in text
    assert "Transfers (all 6, in time order" in invoke("copies", trace, "--top", "0")
    assert "largest" in CliRunner().invoke(cli, ["copies", "--help"]).stdout


@pytest.mark.corpus
def test_compare_busy_and_idle_are_per_device_as_gaps_says() -> None:
    """On a multi-stream trace, compare's device busy and idle are each device's union
    of its streams (gaps' ``devices``), not the sum over streams."""
    from support import corpus_dir

    root = corpus_dir()
    if root is None:
        pytest.skip("NEURONTRACE_CORPUS is not set")
    trace = str(root / "trace_diff.json.gz")
    value = {(r["metric"], r["run"]): r["value"]
             for r in as_json("compare", trace, trace)["metrics"]}
    devices = as_json("gaps", trace)["devices"]
    assert devices, "trace_diff has device work"
    assert value["device_busy_ns", "trace_diff"] == sum(d["busy_ns"] for d in devices)
    assert value["idle_ns", "trace_diff"] == sum(d["idle_ns"] for d in devices)
    tracks = as_json("gaps", trace)["tracks"]
    assert len(tracks) > len(devices)  # several streams: the sum over them differs
    assert value["idle_ns", "trace_diff"] != sum(t["idle_ns"] for t in tracks)


# -- findings between runs (issue 17) ---------------------------------------------------------

def test_compare_naive_rms_norm_says_the_fusion_and_dominant_op_findings_disappeared() -> None:
    naive, rms_norm = traces("cuda")[:2]
    found = as_json("compare", naive, rms_norm)["findings"]
    assert {(r["run"], r["against"]) for r in found} == {("rms_norm", "naive")}
    by = {(r["rule"], tuple(r["ops"])): r for r in found}
    fusion = by[("fusion", ("aten::mul", "aten::mean", "aten::add", "aten::rsqrt",
                            "aten::mul", "aten::mul"))]
    dominant = by[("dominant-op", ("aten::mul",))]
    assert (fusion["change"], dominant["change"]) == ("disappeared", "disappeared")
    assert fusion["after"] is None and dominant["after"] is None
    advised = json.loads(invoke("advise", naive, "--json"))
    assert fusion["before"] == next(f["at_stake_ns"] for f in advised if f["rule"] == "fusion")
    text = invoke("compare", naive, rms_norm)
    said = text[text.index("Findings against naive"):]
    assert "rms_norm: 2 disappeared, 0 appeared" in said
    assert re.search(r"disappeared high +fusion: RMSNorm written out as 6 ops .*\(was 36\.0 µs "
                     r"to 46\.8 µs a step\)", said)
    assert re.search(r"disappeared high +dominant-op: aten::mul takes", said)


def test_a_launch_bound_device_in_both_runs_is_one_kept_finding_whatever_ops_are_near_gaps(
        ) -> None:
    naive, rms_norm = traces("cuda")[:2]
    found = as_json("compare", naive, rms_norm)["findings"]
    (bound,) = [r for r in found if r["rule"] == "launch-bound"]
    assert bound["change"] == "kept" and bound["before"] and bound["after"]
    assert bound["after"]["low"] < bound["before"]["low"]  # less idle waiting for the host


def test_compare_of_three_runs_lists_each_against_the_first() -> None:
    found = as_json("compare", *traces("cuda"))["findings"]
    assert {r["run"] for r in found} == {"rms_norm", "compiled"}
    assert {r["against"] for r in found} == {"naive"}
    for run in ("rms_norm", "compiled"):
        assert not [r for r in found if r["run"] == run and r["rule"] == "fusion"
                    and r["change"] != "disappeared"]


def test_compare_of_one_run_has_no_findings_between_runs() -> None:
    naive = traces("cuda")[0]
    assert as_json("compare", naive)["findings"] == []
    assert "Findings against" not in invoke("compare", naive)
