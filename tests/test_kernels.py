"""``neurontrace kernels``: device work by its own name, checked against the raw JSON.

Independently of the analysis, with the standard library only: the device work of a
Kineto trace is its complete events (``ph: X``) of the categories ``kernel``,
``gpu_memcpy``, ``gpu_memset`` and MTIA ``mtia_ccp_events``, and MTIA ``dma_request``
events (never ``gpu_user_annotation``, ``cuda_sync``, ``cuda_profiler_range`` or MTIA's
device-side ``event_wait``); each
name's calls, total, min and max come from their ``dur`` read as exact decimals of
microseconds. On every corpus trace and on the real CUDA captures, ``kernels --json``
must equal that, and the shares must add up to 1. Where torch can profile a GPU here,
its ``key_averages()`` device rows must agree too.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from neurontrace import schema as S
from neurontrace.analyses import events, kernels, ops
from neurontrace.cli.main import cli

from support import FIXTURES, corpus_dir
from synthetic import dev, table

_CORPUS = corpus_dir()
CORPUS_TRACES = sorted(_CORPUS.glob("*.json*")) if _CORPUS is not None else []
CUDA = FIXTURES / "capture" / "cuda"
CUDA_TRACES = sorted(CUDA.glob("*/trace.json.gz"))
WORK_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
WORK_NAMES = ("dma_request",)
WAIT_NAMES = ("event_wait",)  # MTIA's device-side wait, an mtia_ccp_events row


def raw_kernels(path: Path) -> dict[str, tuple[int, int, int, int]]:
    """{name: (calls, total_ns, min_ns, max_ns)} of the trace's device work."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw,
                     parse_float=Decimal)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    durs: dict[str, list[int]] = defaultdict(list)
    for e in evs:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        if e.get("name") in WAIT_NAMES:
            continue
        if e.get("cat") in WORK_CATEGORIES or e.get("name") in WORK_NAMES:
            durs[e["name"]].append(int(Decimal(e["dur"]) * 1000))
    return {n: (len(d), sum(d), min(d), max(d)) for n, d in durs.items()}


def cli_json(*args: str) -> Any:
    done = CliRunner().invoke(cli, ["kernels", *args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def as_oracle(rows: list[dict[str, Any]]) -> dict[str, tuple[int, int, int, int]]:
    return {r["name"]: (r["calls"], r["total_ns"], r["min_ns"], r["max_ns"]) for r in rows}


def check_against_raw(path: Path) -> list[dict[str, Any]]:
    rows = cli_json(str(path))
    want = raw_kernels(path)
    assert as_oracle(rows) == want
    if rows:
        assert sum(r["share"] for r in rows) == pytest.approx(1.0)
        assert all(r["mean_ns"] == pytest.approx(r["total_ns"] / r["calls"]) for r in rows)
        totals = [r["total_ns"] for r in rows]
        assert totals == sorted(totals, reverse=True)
    return rows


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS_TRACES, ids=lambda p: p.name.split(".")[0])
def test_kernels_equal_the_raw_json_on_every_corpus_trace(path: Path) -> None:
    check_against_raw(path)


@pytest.mark.corpus
def test_the_corpus_is_there_for_the_kernel_check() -> None:
    if _CORPUS is None:
        pytest.skip("NEURONTRACE_CORPUS is not set (make test sets it)")
    assert len(CORPUS_TRACES) >= 9


@pytest.mark.corpus
def test_nccl_kernels_are_device_work_of_their_own_name() -> None:
    if _CORPUS is None:
        pytest.skip("NEURONTRACE_CORPUS is not set (make test sets it)")
    rows = {r["name"]: r for r in check_against_raw(_CORPUS / "nccl_parser_config.json.gz")}
    allreduce = rows["ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, "
                     "ncclWork*)"]
    assert allreduce["calls"] == 15
    assert "Memcpy DtoD (Device -> Device)" in rows  # copies are device rows too


@pytest.mark.parametrize("path", CUDA_TRACES, ids=lambda p: p.parent.name)
def test_kernels_equal_the_raw_json_on_the_cuda_captures(path: Path) -> None:
    rows = check_against_raw(path)
    # the same device time as ops --layer device, only grouped by the work's own name
    dev = ops(events(path), layer="device")
    assert sum(r["total_ns"] for r in rows) == dev.get_column("self_ns").sum()
    assert sum(r["calls"] for r in rows) == dev.get_column("calls").sum()


def test_a_timeline_of_two_streams_by_name() -> None:
    # the module docstring's timeline, with what is not device work beside it
    s7, s20 = "GPU 0 / stream 7", "GPU 0 / stream 20"
    lf = table(
        dev("gemm", 0, 40, track=s7),
        dev("Memcpy DtoD", 20, 30, track=s20, category="gpu_memcpy"),
        dev("relu", 45, 10, track=s7),
        dev("gemm", 70, 60, track=s7),
        dev("nccl:all_reduce", 0, 130, track=s7, category="gpu_user_annotation"),
        dev("Stream Wait Event", 0, 5, track=s20, category="cuda_sync"),
    )
    got = kernels(lf)
    assert got.columns == ["name", "calls", "total_ns", "mean_ns", "min_ns", "max_ns",
                           "share"]
    assert got.rows() == [
        ("gemm", 2, 100, 50.0, 40, 60, 100 / 140),
        ("Memcpy DtoD", 1, 30, 30.0, 30, 30, 30 / 140),
        ("relu", 1, 10, 10.0, 10, 10, 10 / 140),
    ]


def test_an_execution_on_two_cores_is_one_call() -> None:
    lf = table(
        dev("nc_exec", 0, 50, execution="e1", track="nc 0"),
        dev("nc_exec", 5, 55, execution="e1", track="nc 1"),
        dev("nc_exec", 100, 20, execution="e2", track="nc 0"),
    )
    assert kernels(lf).rows() == [("nc_exec", 2, 80, 40.0, 20, 60, 1.0)]


def test_no_device_work_is_an_empty_table_and_one_line() -> None:
    path = FIXTURES / "kineto" / "cpu-rmsnorm-naive.json.gz"
    assert cli_json(str(path)) == []
    done = CliRunner().invoke(cli, ["kernels", str(path)])
    assert done.exit_code == 0 and done.stdout.strip().endswith("no device work found")


def test_top_cuts_the_table_and_says_so_but_json_is_complete() -> None:
    path = CUDA / "naive" / "trace.json.gz"
    everything = cli_json(str(path))
    assert len(everything) == 5
    assert cli_json(str(path), "--top", "2") == everything[:2]
    done = CliRunner().invoke(cli, ["kernels", str(path), "--top", "2"])
    assert done.exit_code == 0
    assert done.stdout.rstrip().splitlines()[-1] == "... 3 more (--top 0 shows all)"


def test_neuron_executions_count_once_with_instructions_inside() -> None:
    path = FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0"
    lf = events(path)
    got = kernels(lf)
    dev = ops(lf, layer="device")
    assert got.height and got.get_column("calls").sum() == dev.get_column("calls").sum()
    assert got.get_column("total_ns").sum() == dev.get_column("self_ns").sum()
    detail = lf.filter(pl.col(S.CATEGORY).is_in(["Instruction", "DmaPacket"]))
    names = set(detail.select(S.NAME).collect().to_series()) - set(got.get_column("name"))
    assert names  # instructions and DMA packets inside executions are not counted again



def _torch_cuda() -> Any:
    t = pytest.importorskip("torch")
    if not t.cuda.is_available():
        pytest.skip("no CUDA device here: the key_averages check runs where torch has one")
    return t


@pytest.mark.torch
def test_agrees_with_key_averages_device_rows_on_a_gpu(tmp_path: Path) -> None:
    t = _torch_cuda()
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    x = t.randn(1024, 1024, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            y = (x @ x).relu() * 2
        y.cpu()
        t.cuda.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    theirs = {e.key: (e.count, e.self_device_time_total * 1000)
              for e in prof.key_averages() if e.device_type == DeviceType.CUDA}
    mine = {r["name"]: (r["calls"], r["total_ns"]) for r in cli_json(str(trace))}
    assert set(mine) == set(theirs)
    for name, (calls, total_ns) in theirs.items():
        assert mine[name][0] == calls, name
        assert abs(mine[name][1] - total_ns) < calls, name
