"""A Neuron capture's device time counts once: executions, not also their instructions.

An execution's device time is its window on the NeuronCore (first start to last end over
the rows that carry its ``execution``: both physical cores under LNC=2)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from neurontrace import analyses

EXPLORER = Path(__file__).parent.parent / "fixtures" / "neuron" / "explorer_rmsnorm_vnc_0"


def test_device_op_share_counts_executions_not_their_instructions() -> None:
    lf = analyses.events(EXPLORER)
    df = lf.collect()
    executions = df.filter((pl.col("layer") == "device") & (pl.col("name") == "nc_exec_running"))
    assert executions.height > 0
    windows = executions.group_by("execution").agg(
        (pl.col("start_ns") + pl.col("dur_ns")).max() - pl.col("start_ns").min()
    )
    share = analyses.ops(lf, layer="device")
    assert share["total_ns"].sum() == windows["start_ns"].sum()
    assert share["calls"].sum() == windows.height


def test_without_executions_the_instructions_are_the_work() -> None:
    lf = analyses.events(EXPLORER).filter(pl.col("name") != "nc_exec_running")
    detail = lf.filter(pl.col("category").is_in(["Instruction", "DmaPacket"])).collect()
    windows = detail.group_by("execution").agg(
        (pl.col("start_ns") + pl.col("dur_ns")).max() - pl.col("start_ns").min()
    )
    assert analyses.ops(lf, layer="device")["total_ns"].sum() == windows["start_ns"].sum()
    # and ActiveTime, a summary of the same busy time, is never counted as work
    with_active = lf.filter(pl.col("category") != "ActiveTime")
    assert analyses.ops(with_active, layer="device").equals(analyses.ops(lf, layer="device"))


EPS_COPY = Path(__file__).parent.parent / "fixtures" / "neuron" / "explorer_eps_copy"


def test_on_an_explorer_only_capture_the_eps_copy_belongs_to_aten_add() -> None:
    """Issue 15, 7: with no Kineto trace the framework rows are SystemProfileEvents'; the
    seed's 4-byte eps write, linked by its flow id to aten::_to_copy only, is the user's
    aten::add's (via aten::_to_copy), as on a Kineto capture."""
    lf = analyses.events(EPS_COPY)
    rows = lf.collect()
    assert set(rows.filter(pl.col("layer") == "framework")["role"]) == {"operator"}
    write = rows.filter(pl.col("name") == "nrt_tensor_write").row(0, named=True)
    names = dict(rows.select("row", "name").iter_rows())
    assert (names[write["framework_row"]], write["link"]) == ("aten::_to_copy", "flow")
    got = analyses.copies(lf)
    assert got.select("op", "via", "direction", "bytes", "tiny").rows() == [
        ("aten::add", "aten::_to_copy", "h2d", 4, True)]
