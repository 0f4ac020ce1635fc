"""The analyses on real traces recorded by others (../shared/corpus/kineto).

CUDA and ROCm traces carry kernels, memcpys and correlations: the real-world test data
for device op share, gaps and copies. Skipped, saying why, without NEURONTRACE_CORPUS.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from neurontrace import schema as S
from neurontrace.analyses import copies, events, gaps, ops, steps
from neurontrace.analyses import vocab as V
from neurontrace.cli.main import cli

pytestmark = pytest.mark.corpus
CORPUS = os.environ.get("NEURONTRACE_CORPUS")
GPU_TRACES = ["amd_trace", "critical_path", "nccl_parser_config", "ns_resolution_trace",
              "trace_diff"]


def trace(name: str) -> Path:
    if not CORPUS:
        pytest.skip("NEURONTRACE_CORPUS is not set (make test sets it)")
    path = Path(CORPUS) / f"{name}.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not in the corpus")
    return path


@pytest.mark.parametrize("name", GPU_TRACES)
def test_device_op_share_accounts_for_all_device_work(name: str) -> None:
    lf = events(trace(name))
    got = ops(lf, layer="device")
    work = lf.filter(V.is_device_work()).select(pl.len(), pl.col(S.DUR_NS).sum()).collect()
    assert got.get_column("calls").sum() == work.item(0, 0)
    assert got.get_column("self_ns").sum() == work.item(0, 1)
    assert got.get_column("share").sum() == pytest.approx(1.0)
    unlinked = got.filter(pl.col("name") == "(unlinked)").get_column("share").sum()
    assert unlinked < 0.01  # correlation / External id links nearly all of it


@pytest.mark.parametrize("name", GPU_TRACES)
def test_gaps_add_up_on_real_traces(name: str) -> None:
    found = gaps(events(trace(name)))
    assert found.tracks.height >= 1
    t = found.tracks
    assert (t.get_column("busy_ns") + t.get_column("idle_ns")).equals(t.get_column("span_ns"))
    assert found.gaps.get_column("dur_ns").sum() == t.get_column("idle_ns").sum()
    assert (found.gaps.get_column("dur_ns") > 0).all()


@pytest.mark.parametrize("name", GPU_TRACES)
def test_every_gpu_memcpy_is_one_transfer(name: str) -> None:
    lf = events(trace(name))
    memcpys = lf.filter(pl.col(S.CATEGORY) == "gpu_memcpy").select(pl.len()).collect().item()
    found = copies(lf)
    device_seen = found.filter(pl.col("layers").list.contains(S.DEVICE))
    assert device_seen.height == memcpys
    assert found.filter(pl.col("direction").is_null()).height == 0


def test_trace_diff_copies_name_the_user_call() -> None:
    found = copies(events(trace("trace_diff")))
    h2d = found.filter(pl.col("direction") == "h2d")
    assert set(h2d.get_column("op")) == {"aten::to"}
    assert set(h2d.get_column("via")) == {"aten::copy_"}
    item = found.filter(pl.col("op") == "aten::item")
    # .item(): 8 bytes back to the host, a d2h copy: small, but no host scalar (not tiny)
    assert item.height == 18 and set(item.get_column("direction")) == {"d2h"}
    assert set(item.get_column("bytes")) == {8} and not item.get_column("tiny").any()


def test_steps_of_a_real_training_trace() -> None:
    got = steps(events(trace("trace_diff")))
    assert got.height == 6
    total = got.get_column("busy_ns") + got.get_column("idle_ns") + got.get_column("host_only_ns")
    assert total.equals(got.get_column("wall_ns"))
    assert (got.get_column("launches") > 0).all()


def _raw_events(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    return [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


def test_nccl_kernels_are_charged_to_the_collective_the_user_called() -> None:
    # From the raw JSON: a kernel's launch (same correlation) names the op of its
    # External id; a record_param_comms is charged to the cpu_op that encloses it on its
    # thread (the smallest one), so the NCCL kernels go to c10d::allreduce_ / broadcast_.
    path = trace("nccl_parser_config")
    evs = _raw_events(path)
    launch = {e["args"]["correlation"]: e for e in evs
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    by_id = {e["args"]["External id"]: e for e in evs
             if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    cpu_ops = [e for e in evs if e.get("cat") == "cpu_op"]

    def enclosing(op: dict[str, Any]) -> dict[str, Any]:
        around = [e for e in cpu_ops if e is not op and e["tid"] == op["tid"]
                  and e["pid"] == op["pid"] and e["ts"] <= op["ts"]
                  and e["ts"] + e["dur"] >= op["ts"] + op["dur"]]
        return min(around, key=lambda e: e["dur"])

    want: dict[str, list[int]] = defaultdict(list)
    for k in evs:
        if k.get("cat") != "kernel" or not k["name"].startswith("ncclKernel"):
            continue
        op = by_id[launch[k["args"]["correlation"]]["args"]["External id"]]
        assert op["name"] == "record_param_comms"  # what Kineto links them to
        want[enclosing(op)["name"]].append(int(k["dur"] * 1000))
    assert set(want) == {"c10d::allreduce_", "c10d::broadcast_"}
    got = {r["name"]: r for r in ops(events(path), layer="device").to_dicts()}
    assert "record_param_comms" not in got
    for name, durs in want.items():  # their only device work is the NCCL kernels
        assert (got[name]["calls"], got[name]["self_ns"]) == (len(durs), sum(durs))
    assert sum(len(d) for d in want.values()) == 21


def _rank_of(path: Path) -> int:
    """The rank a raw trace says (``distributedInfo.rank``, a dict or its Python repr),
    0 where it says none (what a single-process trace is)."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    info = doc.get("distributedInfo")
    if isinstance(info, str):
        found = re.search(r"'rank': (\d+)", info)
        return int(found.group(1)) if found else 0
    return int(info.get("rank", 0)) if isinstance(info, dict) else 0


def _refusal(args: list[str]) -> str:
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 2, done.output
    assert done.stdout == "" and done.stderr.count("\n") == 1
    return done.stderr


def test_a_folder_of_unrelated_corpus_traces_is_refused_naming_the_fix(tmp_path: Path) -> None:
    # Issue 16 item 5: 7 of the 9 corpus traces are rank 0 (or say no rank): merged, their
    # figures would add up (a device "span" of a year). Refused, with the commands that
    # analyse them apart, by every analysis; the same once converted to a dataset.
    folder = trace("trace_diff").parent
    traces = sorted(folder.glob("*.json.gz"))
    zero = [p.name for p in traces if _rank_of(p) == 0]
    assert len(traces) == 9 and len(zero) == 7
    for command in ("gaps", "kernels", "report"):
        said = _refusal([command, str(folder)])
        assert f"{folder}: 9 traces that are not the ranks of one run (7 of them are rank 0: " \
               f"{folder / zero[0]}, " in said
        assert f"(neurontrace report {folder / traces[0].name})" in said
        assert f"(neurontrace compare {folder / traces[0].name} " in said
    dataset = tmp_path / "corpus"
    assert CliRunner().invoke(cli, ["convert", str(folder), str(dataset)]).exit_code == 0
    said = _refusal(["ops", str(dataset)])
    assert "9 traces that are not the ranks of one run (7 of them are rank 0: " in said
    assert f"{dataset / 'rank=0' / 'amd_trace.parquet'}" in said
