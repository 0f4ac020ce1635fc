"""Device work finds its op through the launch's correlation, however the launch found it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

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


def _neuron_links(tmp_path: Path, rows: list[tuple]) -> list[tuple]:
    """``name, framework_row, link`` of Explorer ``SystemProfileEvents`` rows given as
    (source, name, start, dur, tid, flow id, model_id), written with the documented
    schema by ``fixtures/neuron/make_fixtures.py`` and read through ``load``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_fixtures", Path(__file__).resolve().parent.parent / "fixtures" / "neuron"
        / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    folder = tmp_path / "explorer"
    make._parquet(folder, "SystemProfileEvents", [
        {**make._sys(i, name, src, start, dur, [flow], nc=0, tid=tid,
                     extra=None if model is None else {"model_id": model}),
         "process_id": 1, "thread_id": tid}
        for i, (src, name, start, dur, tid, flow, model) in enumerate(rows)])
    df = pl.from_arrow(neurontrace.load(folder))
    assert isinstance(df, pl.DataFrame)
    return df.sort(S.START_NS).select(S.NAME, S.FRAMEWORK_ROW, S.LINK).rows()


def test_a_flow_link_never_crosses_from_one_model_to_another(tmp_path: Path) -> None:
    # SYNTHETIC Neuron rows: nrt_execute of model 7 is linked by nesting and carries
    # flow 1; a device row of model 9 with flow 1 must not take it (flow ids are
    # per-model counters), one of model 7 does, and one without a model takes any source.
    got = _neuron_links(tmp_path, [
        ("framework", "aten::mul", 100, 100, 1, "9", None),
        ("neuron_rt", "nrt_execute", 110, 50, 1, "1", 7),
        ("neuron_hw", "exec of model 9", 300, 10, 2, "1", 9),
        ("neuron_hw", "exec of model 7", 320, 10, 2, "1", 7),
        ("neuron_hw", "no model", 340, 10, 2, "1", None),
    ])
    assert got == [("aten::mul", None, None), ("nrt_execute", 0, "nesting"),
                   ("exec of model 9", None, None), ("exec of model 7", 0, "flow"),
                   ("no model", 0, "flow")]


def test_a_flow_link_prefers_its_own_model_then_an_op_of_no_model(tmp_path: Path) -> None:
    # SYNTHETIC: flow 1 is carried by two framework ops (no model) and by the runtime
    # call of model 9 inside the second; model 9's device row takes its model's call
    # (-> the second op) over the first op, the earliest source of flow 1; model 8's,
    # with no source of its model, takes the first op (a source of no model).
    got = _neuron_links(tmp_path, [
        ("framework", "aten::mul", 100, 100, 1, "1", None),
        ("framework", "aten::add", 300, 100, 1, "1", None),
        ("neuron_rt", "nrt_execute", 310, 50, 1, "1", 9),
        ("neuron_hw", "exec of model 9", 500, 10, 2, "1", 9),
        ("neuron_hw", "exec of model 8", 520, 10, 2, "1", 8),
    ])
    assert got == [("aten::mul", None, None), ("aten::add", None, None),
                   ("nrt_execute", 1, "nesting"), ("exec of model 9", 1, "flow"),
                   ("exec of model 8", 0, "flow")]


def test_flow_sources_are_kept_only_for_the_flow_ids_of_rows_left_to_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SYNTHETIC: on a CUDA trace every launch is a flow source, and almost no row is left
    # for rule 4; the sources it looks through must be those of the flow ids of the rows
    # left to link (memory follows those rows, not every arrow of the trace), and the
    # link is the same. Flows 2-4 are carried only by rows linked by nesting.
    from neurontrace.table import linking

    seen: list[set] = []
    real = linking._flow_hits

    def recording(todo: pl.DataFrame, src: pl.DataFrame) -> pl.DataFrame:
        seen.append(set(src.get_column("_fid").to_list()))
        return real(todo, src)

    monkeypatch.setattr(linking, "_flow_hits", recording)
    got = _neuron_links(tmp_path, [
        ("framework", "aten::mul", 100, 100, 1, "9", None),
        ("neuron_rt", "nrt_execute", 110, 10, 1, "1", 7),
        ("neuron_rt", "nrt_tensor_write", 130, 10, 1, "2", 7),
        ("neuron_rt", "nrt_tensor_read", 150, 10, 1, "3", 7),
        ("neuron_rt", "nrt_execute", 170, 10, 1, "4", 7),
        ("neuron_hw", "exec of flow 1", 300, 10, 2, "1", 7),
    ])
    assert got[-1] == ("exec of flow 1", 0, "flow")
    assert seen and all(fids == {"neuron:1"} for fids in seen)
