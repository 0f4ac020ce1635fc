"""``neurontrace launches``: launch calls, their device work and the delay between,
checked against the raw JSON.

Independently of the analysis, with the standard library only: in a Kineto trace a
launch is a complete event (``ph: X``) of category ``cuda_runtime`` / ``cuda_driver``
(``hip``'s are ``cuda_runtime`` too) and the device work (``kernel``, ``gpu_memcpy``,
``gpu_memset``) carrying the same ``args.correlation``; the call's time, the work's time
and the launch delay (work ``ts`` - call ``ts``) are read as exact decimals of
microseconds. Per correlation the analysis must give exactly those; per kernel name the
counts, median, nearest-rank p95, max and short launches must follow from them; and the
device annotations (``gpu_user_annotation``) per name must add up as in the JSON.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from neurontrace import analyses as A
from neurontrace import schema as S
from neurontrace.analyses.gaps import inputs
from neurontrace.analyses.launches import launch_summary, outliers
from neurontrace.cli.main import cli

from support import FIXTURES, corpus_dir
from support import raw_complete_events as raw_events
from support import us_to_ns as _ns
from synthetic import dev, op, rt, table

_CORPUS = corpus_dir()
NAMED = ("nccl_parser_config", "trace_diff", "ns_resolution_trace")
CORPUS_TRACES = [_CORPUS / f"{n}.json.gz" for n in NAMED] if _CORPUS is not None else []
CUDA_TRACES = sorted((FIXTURES / "capture" / "cuda").glob("*/trace.json.gz"))
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
WORK_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")

Launch = tuple[str, int, int, int]  # name, call_ns, device_ns, launch_delay_ns




def raw_launches(path: Path) -> dict[int, Launch]:
    """{correlation: (work name, call_ns, device_ns, launch_delay_ns)}; of several calls
    of one correlation, the first in the file."""
    calls: dict[int, dict[str, Any]] = {}
    work: list[dict[str, Any]] = []
    for e in raw_events(path):
        corr = (e.get("args") or {}).get("correlation")
        if corr is None:
            continue
        if e.get("cat") in CALL_CATEGORIES:
            calls.setdefault(int(corr), e)
        elif e.get("cat") in WORK_CATEGORIES:
            work.append(e)
    out: dict[int, Launch] = {}
    for w in work:
        corr = int(w["args"]["correlation"])
        if corr in calls:
            c = calls[corr]
            assert corr not in out, "one piece of work per correlation in these traces"
            out[corr] = (w["name"], _ns(c["dur"]), _ns(w["dur"]), _ns(w["ts"]) - _ns(c["ts"]))
    return out


def cli_json(*args: str) -> Any:
    done = CliRunner().invoke(cli, ["launches", *args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def p95(values: list[int]) -> int:
    """Nearest rank: the ceil(0.95 n)-th smallest."""
    return sorted(values)[-(-95 * len(values) // 100) - 1]


def check_against_raw(path: Path) -> None:
    want = raw_launches(path)
    assert want, f"{path.name}: no launch in the raw JSON"
    got = A.launches(A.events(path))
    assert {r[S.CORRELATION]: (r[S.NAME], r["call_ns"], r["device_ns"], r["launch_delay_ns"])
            for r in got.iter_rows(named=True)} == want
    assert got.height == len(want)
    # the summary per kernel name, from the raw launches
    per: dict[str, list[Launch]] = defaultdict(list)
    for launch in want.values():
        per[launch[0]].append(launch)
    rows = {r["key"]: r for r in cli_json(str(path))["kernels"]}
    assert set(rows) == set(per)
    for name, ls in per.items():
        delays = [x[3] for x in ls]
        r = rows[name]
        assert r["launches"] == len(ls)
        assert r["call_ns"] == sum(x[1] for x in ls)
        assert r["device_ns"] == sum(x[2] for x in ls)
        assert r["median_delay_ns"] == pytest.approx(statistics.median(delays))
        assert r["mean_delay_ns"] == pytest.approx(statistics.mean(delays))
        assert r["p95_delay_ns"] == p95(delays)
        assert r["max_delay_ns"] == max(delays)
        assert r["short"] == sum(x[2] < x[1] for x in ls)
        assert r["outliers"] == sum(x[1] > 50_000 or x[3] > 100_000 for x in ls)


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS_TRACES, ids=lambda p: p.name.split(".")[0])
def test_launch_delay_per_correlation_equals_the_raw_json_on_corpus_traces(path: Path) -> None:
    check_against_raw(path)


@pytest.mark.parametrize("path", CUDA_TRACES, ids=lambda p: p.parent.name)
def test_launch_delay_per_correlation_equals_the_raw_json_on_the_cuda_captures(
        path: Path) -> None:
    check_against_raw(path)


@pytest.mark.corpus
def test_the_corpus_is_there_for_the_launch_check() -> None:
    if _CORPUS is None:
        pytest.skip("NEURONTRACE_CORPUS is not set")
    assert all(p.exists() for p in CORPUS_TRACES)


@pytest.mark.corpus
def test_device_annotations_add_up_as_in_the_raw_json() -> None:
    if _CORPUS is None:
        pytest.skip("NEURONTRACE_CORPUS is not set")
    path = _CORPUS / "nccl_parser_config.json.gz"
    want: dict[str, list[int]] = defaultdict(list)
    for e in raw_events(path):
        if e.get("cat") == "gpu_user_annotation":
            want[e["name"]].append(_ns(e["dur"]))
    rows = cli_json(str(path))["annotations"]
    assert {r["name"]: (r["calls"], r["total_ns"], r["max_ns"]) for r in rows} == {
        n: (len(d), sum(d), max(d)) for n, d in want.items()}
    assert "nccl:all_reduce" in want  # the collectives' own ranges are among them


def test_a_launch_is_timed_from_the_call_start_and_short_when_the_kernel_is_shorter() -> None:
    # the module docstring's timeline: call 0..24, kernel 40..49
    lf = table(
        op("aten::mm", 0, 30),
        rt("cudaLaunchKernel", 0, 24, category="cuda_runtime", correlation=7),
        dev("gemm", 40, 9, category="kernel", correlation=7, framework_row=0),
    )
    got = A.launches(lf).row(0, named=True)
    assert (got["call"], got[S.NAME], got["op"]) == ("cudaLaunchKernel", "gemm", "aten::mm")
    assert (got["call_ns"], got["device_ns"], got["launch_delay_ns"], got["queue_ns"]) == (
        24, 9, 40, 16)
    assert got["short"] is True


def test_work_without_a_call_of_its_correlation_is_no_launch() -> None:
    lf = table(
        rt("cudaLaunchKernel", 0, 5, category="cuda_runtime", correlation=1),
        dev("gemm", 10, 9, category="kernel", correlation=2),
        dev("relu", 20, 9, category="kernel"),
    )
    assert A.launches(lf).height == 0


def test_outliers_are_calls_over_50us_or_delays_over_100us_exclusive() -> None:
    rows = []
    cases = [  # (call_ns, delay_ns): outlier?
        (50_000, 100_000),   # both at the cutoff: no
        (50_001, 60_000),    # call past: yes
        (1_000, 100_001),    # delay past: yes
    ]
    for i, (call, delay) in enumerate(cases):
        t0 = i * 1_000_000
        rows += [rt("cudaLaunchKernel", t0, call, category="cuda_runtime", correlation=i),
                 dev("k", t0 + delay, 10, category="kernel", correlation=i)]
    t = A.launches(table(*rows))
    assert sorted(outliers(t).get_column("launch_delay_ns").to_list()) == [60_000, 100_001]
    summary = launch_summary(t).row(0, named=True)
    assert (summary["launches"], summary["outliers"], summary["max_delay_ns"]) == (3, 2, 100_001)
    assert summary["p95_delay_ns"] == 100_001  # ceil(0.95 * 3) = 3rd smallest
    assert summary["median_delay_ns"] == 100_000


def test_a_collectives_launches_are_charged_to_the_collective_op() -> None:
    lf = table(
        op("c10d::allreduce_", 0, 100),
        op("record_param_comms", 10, 80, parent=0),
        rt("cudaLaunchKernelExC", 20, 5, category="cuda_runtime", correlation=3),
        dev("ncclKernel_AllReduce", 40, 50, category="kernel", correlation=3,
            framework_row=1),
    )
    assert launch_summary(A.launches(lf), "op").get_column("key").to_list() == [
        "c10d::allreduce_"]


def test_launches_json_names_its_tables() -> None:
    path = FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz"
    doc = cli_json(str(path), "--top", "1")
    assert set(doc) == {"kernels", "ops", "outliers", "annotations"}
    assert len(doc["kernels"]) == 1
    full = cli_json(str(path))
    assert len(full["kernels"]) > 1  # --json is complete unless --top is given


def test_launches_of_a_trace_without_device_work_says_so() -> None:
    cpu = FIXTURES / "capture" / "cpu"
    traces = sorted(cpu.glob("*/trace.json.gz")) if cpu.exists() else []
    if not traces:
        pytest.skip("no CPU capture fixture")
    done = CliRunner().invoke(cli, ["launches", str(traces[0])])
    assert done.exit_code == 0, done.output
    assert "no launches found" in done.stdout


def test_launches_of_a_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["launches", str(tmp_path / "nope.json")])
    assert done.exit_code == 2
    assert len(done.stderr.strip().splitlines()) == 1


def test_without_a_correlation_the_launch_is_the_last_call_sharing_a_flow_before_the_work(
        ) -> None:
    lf = table(
        op("aten::add", 0, 100),
        rt("nrt_tensor_write", 10, 5, flow_ids=["neuron:f2"]),
        rt("nrt_execute", 20, 30, flow_ids=["neuron:f2"], model_id=7),
        rt("nrt_execute", 45, 5, flow_ids=["neuron:f2"], model_id=8),  # another model
        rt("nrt_execute", 70, 5, flow_ids=["neuron:f2"]),  # after the work started
        dev("nc_exec_running", 40, 20, category="neuron_hw", flow_ids=["neuron:f2"],
            model_id=7, execution="nc0:exec2"),
        dev("nc_exec_running", 41, 25, category="neuron_hw", flow_ids=["neuron:f2"],
            model_id=7, execution="nc0:exec2"),  # the same execution on the other core
    )
    (got,) = A.launches(lf).to_dicts()
    assert (got["call"], got["call_start_ns"], got["via"]) == ("nrt_execute", 20, "flow")
    assert (got["device_start_ns"], got["device_ns"], got["launch_delay_ns"]) == (40, 26, 20)
    # gaps times launch latency from the same call (not the earliest sharing the flow)
    assert inputs(lf).work.get_column("launch").to_list() == [20, 20]


def test_a_correlation_pairs_before_a_flow() -> None:
    lf = table(
        rt("cudaLaunchKernel", 0, 5, category="cuda_runtime", correlation=4,
           flow_ids=["ac2g:4"]),
        rt("cudaLaunchKernel", 8, 5, category="cuda_runtime", flow_ids=["ac2g:4"]),
        dev("gemm", 20, 9, category="kernel", correlation=4, flow_ids=["ac2g:4"]),
    )
    (got,) = A.launches(lf).to_dicts()
    assert (got["call_start_ns"], got["via"]) == (0, "correlation")


def test_the_neuron_capture_pairs_each_execution_with_its_nrt_execute() -> None:
    got = A.launches(A.events(FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0"))
    assert got.select("call", "op", "via").rows() == [
        ("nrt_execute", "aten::mul", "flow"), ("nrt_execute", "aten::add", "flow")]
    assert (got.get_column("launch_delay_ns")
            == got.get_column("device_start_ns") - got.get_column("call_start_ns")).all()


def test_launches_sort_orders_the_summaries_and_csv_prints_the_kernel_table() -> None:
    path = str(FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz")
    doc = cli_json(path, "--sort", "p95_delay")
    p95s = [r["p95_delay_ns"] for r in doc["kernels"]]
    assert p95s == sorted(p95s, reverse=True)
    done = CliRunner().invoke(cli, ["launches", path, "--csv"])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].split(",") == [
        "key", "launches", "call_ns", "device_ns", "mean_delay_ns", "median_delay_ns",
        "p95_delay_ns", "max_delay_ns", "short", "outliers"]
    assert len(lines) == 1 + len(cli_json(path)["kernels"])


def test_launches_step_filter_keeps_the_launches_of_that_step() -> None:
    path = str(FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz")
    every = sum(r["launches"] for r in cli_json(path)["kernels"])
    one = sum(r["launches"] for r in cli_json(path, "--step", "2")["kernels"])
    steps = {r[S.STEP] for r in A.launches(A.events(path)).to_dicts()}
    assert len(steps) > 1 and 0 < one < every


def test_launches_fit_80_columns() -> None:
    path = str(FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz")
    done = CliRunner().invoke(cli, ["launches", path], env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    assert max(map(len, done.stdout.splitlines())) <= 80


@pytest.mark.parametrize("path", [FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0",
                                  *CUDA_TRACES], ids=lambda p: p.parent.name + "/" + p.name)
def test_gaps_and_launches_pair_each_piece_of_work_with_the_same_call(path: Path) -> None:
    lf = A.events(path)
    paired = dict(A.launches(lf).select("device_start_ns", "call_start_ns").iter_rows())
    work = inputs(lf).work.filter(pl.col("start").is_in(list(paired)))
    assert work.height >= len(paired) > 0
    assert all(paired[s] == launch for s, launch in work.select("start", "launch").iter_rows())
