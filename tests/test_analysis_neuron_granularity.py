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
