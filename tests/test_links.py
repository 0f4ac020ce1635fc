"""Device work finds its op through the launch's correlation, however the launch found it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

import neurontrace
from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics


def test_kernel_inherits_the_op_of_a_launch_linked_by_nesting(tmp_path: Path) -> None:
    # SYNTHETIC, shaped like corpus/critical_path.json.gz (older Kineto): the launch's
    # External id matches no cpu_op, so the launch is linked by nesting inside aten::add;
    # the kernel shares only its correlation with the launch.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
         "ts": 100.0, "dur": 50.0, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 110.0, "dur": 10.0, "args": {"External id": 9, "correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7,
         "ts": 130.0, "dur": 5.0, "args": {"External id": 9, "correlation": 9,
                                           "device": 0, "stream": 7}},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    df = pl.from_arrow(neurontrace.load(path))
    assert isinstance(df, pl.DataFrame)
    got = df.select(S.NAME, S.FRAMEWORK_ROW, S.LINK).rows()
    assert got == [("aten::add", None, None), ("cudaLaunchKernel", 0, "nesting"),
                   ("add_kernel", 0, "correlation")]


def test_a_flow_inside_a_span_binds_to_it_and_one_outside_every_span_is_counted(
        tmp_path: Path) -> None:
    # SYNTHETIC: Kineto places a flow at its slice's start; one that falls inside a span
    # instead binds to the latest span on its thread that started before it and is still
    # open; one after every span binds to nothing and is counted.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1,
         "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1,
         "ts": 110.0, "dur": 10.0},
        {"ph": "X", "cat": "cpu_op", "name": "other thread", "pid": 1, "tid": 2,
         "ts": 100.0, "dur": 100.0},
        {"ph": "s", "cat": "fwdbwd", "id": 1, "pid": 1, "tid": 1, "ts": 115.0},
        {"ph": "f", "cat": "fwdbwd", "id": 1, "pid": 1, "tid": 1, "ts": 125.0, "bp": "e"},
        {"ph": "s", "cat": "fwdbwd", "id": 2, "pid": 1, "tid": 1, "ts": 300.0},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    diag = Diagnostics()
    df = pl.from_arrow(neurontrace.load(path, diag=diag))
    assert isinstance(df, pl.DataFrame)
    flows = dict(df.select(S.NAME, S.FLOW_IDS).rows())
    # 115 is inside "inner"; at 125 "inner" has ended, and the latest span started
    # before 125 on that thread is "inner": the arrow's end binds to nothing.
    assert flows == {"outer": None, "inner": ["fwdbwd:1"], "other thread": None}
    assert diag.counts["unbound_flow"] == 2
