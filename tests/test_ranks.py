"""``neurontrace ranks``: per-rank step times, the slowest rank, and each rank's device
time split into compute / communication / memory / idle, checked against the raw JSON.

Independently of the analysis, with the standard library only:

- step times: each trace's ``ProfilerStep#N`` complete events (``dur`` as exact decimals
  of microseconds), on a dataset of two ranks made by converting two corpus traces with
  ``convert --rank 0`` and ``--rank 1`` into one folder; the slowest rank of a step is
  the one with the longest step (ties: the lowest rank);
- the breakdown: the trace's device work (``kernel``, ``gpu_memcpy``, ``gpu_memset``
  complete events) classed by name and category (``nccl*`` communication, other kernels
  compute, copies and memsets memory: in the NCCL corpus trace every kernel a collective
  launched is named ``ncclKernel_*``), swept instant by instant over the sorted
  boundaries of all its intervals, each elementary interval given to the first class
  present in it (compute, communication, memory).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neurontrace import analyses as A
from neurontrace.cli.main import cli

from support import FIXTURES, corpus_dir
from support import raw_complete_events as raw_events
from support import us_to_ns as _ns
from synthetic import dev, op, table

_CORPUS = corpus_dir()
STEP = "ProfilerStep#"




def raw_steps(path: Path) -> dict[int, int]:
    """{N: wall_ns} of the trace's ProfilerStep#N spans (host side, not the device
    annotations Kineto draws with the same name)."""
    return {int(e["name"][len(STEP):]): _ns(e["dur"]) for e in raw_events(path)
            if e.get("name", "").startswith(STEP) and e.get("cat") != "gpu_user_annotation"}


def raw_breakdown(path: Path) -> dict[str, int]:
    """compute / communication / memory / idle / collective / overlap, in ns."""
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for e in raw_events(path):
        cat = e.get("cat")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        cls = ("communication" if e["name"].lower().startswith("nccl")
               else "compute" if cat == "kernel" else "memory")
        t0 = _ns(e["ts"])
        spans[cls].append((t0, t0 + _ns(e["dur"])))
    every = [iv for ivs in spans.values() for iv in ivs]
    cuts = sorted({t for iv in every for t in iv})
    out = dict.fromkeys(("compute", "communication", "memory", "idle", "collective",
                         "overlap"), 0)
    # each class's intervals as +1/-1 events, swept over the elementary intervals
    deltas: dict[str, dict[int, int]] = {c: defaultdict(int) for c in spans}
    for c, ivs in spans.items():
        for a, b in ivs:
            deltas[c][a] += 1
            deltas[c][b] -= 1
    live = dict.fromkeys(spans, 0)
    for a, b in zip(cuts, cuts[1:], strict=False):
        for c in spans:
            live[c] += deltas[c].get(a, 0)
        on = [c for c in ("compute", "communication", "memory") if live.get(c, 0) > 0]
        out[on[0] if on else "idle"] += b - a
        if live.get("communication", 0) > 0:
            out["collective"] += b - a
            if live.get("compute", 0) > 0:
                out["overlap"] += b - a
    out["span"] = cuts[-1] - cuts[0]
    return out


def cli_json(*args: str) -> Any:
    done = CliRunner().invoke(cli, ["ranks", *args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def two_ranks(tmp_path: Path, first: Path, second: Path) -> Path:
    """A dataset folder holding ``first`` converted as rank 0 and ``second`` as rank 1."""
    ds = tmp_path / "ds"
    ds.mkdir()
    for rank, src in enumerate((first, second)):
        done = CliRunner().invoke(cli, ["convert", str(src), "--rank", str(rank),
                                        str(ds / f"rank{rank}.parquet")])
        assert done.exit_code == 0, done.output
    return ds


@pytest.mark.corpus
def test_per_rank_step_times_and_slowest_rank_equal_the_raw_json_on_two_ranks(
        tmp_path: Path) -> None:
    if _CORPUS is None:
        pytest.skip("NEURONTRACE_CORPUS is not set")
    # both record a ProfilerStep#1, so that step has two ranks to compare
    traces = (_CORPUS / "amd_trace.json.gz", _CORPUS / "triton_example.json.gz")
    doc = cli_json(str(two_ranks(tmp_path, *traces)))
    want = {(n, rank): wall for rank, t in enumerate(traces)
            for n, wall in raw_steps(t).items()}
    assert {(r["step"], r["rank"]): r["wall_ns"] for r in doc["steps"]} == want
    by_step: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (n, rank), wall in want.items():
        by_step[n].append((-wall, rank))
    slow = {n: min(v) for n, v in by_step.items()}
    assert {r["step"]: (r["ranks"], r["slowest_rank"], r["slowest_ns"], r["spread_ns"])
            for r in doc["slowest"]} == {
        n: (len(v), slow[n][1], -slow[n][0], -slow[n][0] - min(-w for w, _ in v))
        for n, v in by_step.items()}
    assert any(r["ranks"] == 2 for r in doc["slowest"])
    assert {r["rank"]: r["steps"] for r in doc["ranks"]} == {
        rank: len(raw_steps(t)) for rank, t in enumerate(traces)}


@pytest.mark.corpus
@pytest.mark.parametrize("name", ["nccl_parser_config", "trace_diff", "ns_resolution_trace"])
def test_breakdown_merged_across_streams_equals_a_sweep_of_the_raw_json(name: str) -> None:
    if _CORPUS is None:
        pytest.skip("NEURONTRACE_CORPUS is not set")
    path = _CORPUS / f"{name}.json.gz"
    (got,) = cli_json(str(path))["breakdown"]
    want = raw_breakdown(path)
    assert {k: got[f"{k}_ns"] for k in want} == want
    assert got["compute_ns"] + got["communication_ns"] + got["memory_ns"] + got["idle_ns"] \
        == got["span_ns"]
    if name == "nccl_parser_config":  # the NCCL trace has collectives, partly hidden
        assert 0 < got["overlap_ns"] < got["collective_ns"]
        assert got["overlap"] == pytest.approx(got["overlap_ns"] / got["collective_ns"])


def test_an_instant_counts_once_compute_before_communication_before_memory() -> None:
    # the module docstring's timeline
    lf = table(
        dev("gemm", 0, 10, category="kernel", stream=7, track="stream 7"),
        dev("relu", 14, 10, category="kernel", stream=7, track="stream 7"),
        dev("ncclKernel_AllReduce", 6, 19, category="kernel", stream=40, track="stream 40"),
        dev("Memcpy DtoD", 30, 5, category="gpu_memcpy", stream=40, track="stream 40"),
    )
    (got,) = A.breakdown(lf).to_dicts()
    assert got == {
        "rank": 0, "span_ns": 35, "compute_ns": 20, "communication_ns": 5,
        "memory_ns": 5, "idle_ns": 5, "collective_ns": 19, "overlap_ns": 14,
        "overlap": 14 / 19,
    }


def test_work_a_collective_op_launched_is_communication_whatever_its_name() -> None:
    lf = table(
        op("c10d::allreduce_", 0, 100),
        op("record_param_comms", 5, 90, parent=0),
        dev("Memcpy DtoD", 10, 20, category="gpu_memcpy", framework_row=1),
        dev("gemm", 40, 10, category="kernel"),
    )
    (got,) = A.breakdown(lf).to_dicts()
    assert (got["communication_ns"], got["memory_ns"], got["compute_ns"]) == (20, 0, 10)
    assert got["overlap"] == 0.0


def test_a_rank_without_communication_has_no_overlap_share() -> None:
    (got,) = A.breakdown(table(dev("gemm", 0, 10, category="kernel"))).to_dicts()
    assert got["collective_ns"] == 0 and got["overlap"] is None


def test_the_slowest_rank_of_a_step_is_the_longest_ties_to_the_lowest() -> None:
    lf = table(
        op("ProfilerStep#4", 0, 10, rank=0), op("ProfilerStep#5", 10, 12, rank=0),
        op("ProfilerStep#4", 0, 14, rank=1), op("ProfilerStep#5", 14, 9, rank=1),
        op("ProfilerStep#4", 0, 14, rank=2),
    )
    times = A.step_times(lf)
    assert A.slowest(times).to_dicts() == [
        {"step": 4, "ranks": 3, "slowest_rank": 1, "slowest_ns": 14, "fastest_ns": 10,
         "spread_ns": 4},
        {"step": 5, "ranks": 2, "slowest_rank": 0, "slowest_ns": 12, "fastest_ns": 9,
         "spread_ns": 3},
    ]
    assert A.per_rank(times).select("rank", "steps", "max_ns", "slowest").rows() == [
        (0, 2, 12, 1), (1, 2, 14, 1), (2, 1, 14, 0)]


def test_ranks_of_the_two_rank_neuron_run_are_both_shown() -> None:
    doc = cli_json(str(FIXTURES / "neuron" / "run_two_ranks"))
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert [r["rank"] for r in doc["breakdown"]] == [0, 1]
    assert all(r["compute_ns"] + r["communication_ns"] + r["memory_ns"] + r["idle_ns"]
               == r["span_ns"] for r in doc["breakdown"])


def test_ranks_of_a_cpu_trace_has_steps_and_no_device_work() -> None:
    trace = FIXTURES / "capture" / "cpu" / "naive" / "trace.json.gz"
    doc = cli_json(str(trace))
    assert doc["steps"] and doc["breakdown"] == []
    done = CliRunner().invoke(cli, ["ranks", str(trace)])
    assert done.exit_code == 0 and "no device work" in done.stdout


def test_ranks_of_a_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["ranks", str(tmp_path / "nope.json")])
    assert done.exit_code == 2
    assert len(done.stderr.strip().splitlines()) == 1


def test_ranks_rank_filter_keeps_one_rank_and_csv_prints_the_breakdown() -> None:
    run = str(FIXTURES / "neuron" / "run_two_ranks")
    doc = cli_json(run, "--rank", "1")
    assert [r["rank"] for r in doc["breakdown"]] == [1]
    assert {r["rank"] for r in doc["steps"]} == {1}
    done = CliRunner().invoke(cli, ["ranks", run, "--csv"])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].split(",") == list(A.breakdown(A.events(run)).columns)
    assert len(lines) == 3


def test_ranks_fit_80_columns() -> None:
    done = CliRunner().invoke(cli, ["ranks", str(FIXTURES / "neuron" / "run_two_ranks")],
                              env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    assert max(map(len, done.stdout.splitlines())) <= 80
