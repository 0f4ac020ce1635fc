"""How runtime and device rows find the framework op they belong to."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import neurontrace
from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers import neuron as N
from neurontrace.readers.base import Events, Source
from neurontrace.readers.neuron.clock import place
from neurontrace.table.assemble import assemble

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "neuron"


def links(path: Path, diag: Diagnostics | None = None) -> dict[tuple[str, int], tuple]:
    df = pl.from_arrow(neurontrace.load(path, diag=diag))
    assert isinstance(df, pl.DataFrame)
    names = dict(df.select(S.ROW, S.NAME).iter_rows())
    out = {}
    for row in df.iter_rows(named=True):
        fw = row[S.FRAMEWORK_ROW]
        out[(row[S.NAME], row[S.ROW])] = (names.get(fw), row[S.LINK])
    return out


def by_name(got: dict[tuple[str, int], tuple], name: str) -> set[tuple]:
    return {v for (n, _), v in got.items() if n == name}


def test_explorer_flows_link_framework_to_runtime_to_hardware() -> None:
    got = links(FIX / "explorer_rmsnorm_vnc_0")
    # On a runtime worker thread, away from any op: the framework row's own flow id.
    assert by_name(got, "nrt_tensor_write") == {("aten::add", "flow")}
    assert by_name(got, "nc_exec_running") == {("aten::mul", "flow"), ("aten::add", "flow")}
    assert by_name(got, "aten::mul") == {(None, None)}


def test_flows_are_followed_over_more_than_one_hop() -> None:
    got = links(FIX / "explorer_rmsnorm_vnc_0")
    assert by_name(got, "hw_notify") == {("aten::add", "flow")}


def test_a_runtime_call_inside_an_op_on_its_thread_links_by_nesting() -> None:
    got = links(FIX / "explorer_rmsnorm_vnc_0")
    assert by_name(got, "kbl_exec_wait") == {("aten::mul", "nesting")}
    assert by_name(got, "nrt_execute") == {("aten::mul", "nesting"),
                                           ("aten::add", "nesting")}


def test_instructions_belong_to_the_op_that_started_their_execution() -> None:
    got = links(FIX / "explorer_rmsnorm_vnc_0")
    assert by_name(got, "MATMUL") == {("aten::mul", "execution")}
    assert by_name(got, "ACTIVATION") == {("aten::add", "execution")}
    assert by_name(got, "qScalarSpillReload0-Q1-E64") == {("aten::add", "execution")}


def test_rows_no_launch_started_are_not_counted_unlinked() -> None:
    diag = Diagnostics()
    got = links(FIX / "explorer_rmsnorm_vnc_0", diag)
    assert by_name(got, "nrt_load") == {(None, None)}  # another thread, no flow
    assert by_name(got, "timestamp_sync_point") == {(None, None)}
    # nrt_load is a runtime call outside any op, the sync point a clock marker on the
    # device (role other), not work a launch started: neither is abnormal
    assert "unlinked" not in diag.counts


def test_without_flows_an_execution_belongs_to_the_last_runtime_call_on_its_core() -> None:
    got = links(FIX / "system_profile_string_ids.json")
    assert by_name(got, "nrt_execute") == {("aten::mul", "nesting")}
    assert by_name(got, "nc_exec_running") == {("aten::mul", "time")}


# -- invariants --------------------------------------------------------------------------

_rows = st.lists(
    st.tuples(
        st.sampled_from(S.LAYERS),
        st.integers(0, 50),  # start
        st.integers(0, 20),  # dur
        st.sampled_from([None, "a", "b", "c"]),  # flow id
        st.sampled_from([None, 1, 2]),  # execution id
        st.sampled_from([None, 0, 1]),  # device
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(_rows)
def test_framework_row_always_names_a_framework_row_other_than_itself(rows: list) -> None:
    df = pl.DataFrame({
        S.LAYER: [r[0] for r in rows], S.NAME: [f"e{i}" for i in range(len(rows))],
        S.KIND: [S.SPAN] * len(rows), S.START_NS: [r[1] for r in rows],
        S.DUR_NS: [r[2] for r in rows], S.PID: [1] * len(rows), S.TID: [1] * len(rows),
        S.FLOW_IDS: [[f"neuron:{r[3]}"] if r[3] else None for r in rows],
        S.EXECUTION: [f"nc0:exec{r[4]}" if r[4] else None for r in rows],
        S.DEVICE_COL: [r[5] for r in rows],
    }, schema_overrides={S.FLOW_IDS: pl.List(pl.String), S.EXECUTION: pl.String,
                         S.DEVICE_COL: pl.Int64})
    batch = N.to_batch(df)
    src = Source(Path("rows"), "neuron-explorer",
                 lambda diag, progress: Events(batches=iter([batch])), "rows")
    built = assemble(src, Diagnostics())
    try:
        out = pl.from_arrow(built.table())
    finally:
        built.close()
    assert isinstance(out, pl.DataFrame)
    layer = dict(out.select(S.ROW, S.LAYER).iter_rows())
    for row in out.iter_rows(named=True):
        fw = row[S.FRAMEWORK_ROW]
        assert (fw is None) == (row[S.LINK] is None)
        if row[S.LAYER] == S.FRAMEWORK:
            assert fw is None
        elif fw is not None:
            assert layer[fw] == S.FRAMEWORK and fw != row[S.ROW]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 10**4)), min_size=1,
                max_size=6, unique_by=lambda w: w[0]),
       st.integers(10**17, 2 * 10**18), st.lists(st.integers(0, 10**6), max_size=20))
def test_windows_move_each_device_row_by_its_own_executions_offset(
        windows: list, host0: int, starts: list) -> None:
    windows = sorted(windows)
    d = pl.DataFrame({"d_start": [w[0] for w in windows],
                      "d_end": [w[0] + w[1] for w in windows]})
    h = pl.DataFrame({"start": [host0 + 7 * w[0] for w in windows],
                      "end": [host0 + 7 * w[0] + w[1] for w in windows],
                      S.EXECUTION: [f"e{k}" for k in range(len(windows))]})
    p = place(min([windows[0][0], *starts]), d, h, None)
    assert p.method == "execution_windows" and p.uncertainty_ns == 0
    rows = pl.DataFrame({S.START_NS: starts}, schema={S.START_NS: pl.Int64})
    placed = p.apply(rows).select(S.START_NS, S.EXECUTION).iter_rows()
    for t, (new, ex) in zip(starts, placed, strict=True):
        k = max([i for i, w in enumerate(windows) if w[0] <= t], default=0)
        assert new == host0 + 7 * windows[k][0] + (t - windows[k][0])
        assert ex == (f"e{k}" if windows[0][0] <= t else None)


def test_device_times_already_on_the_epoch_are_kept() -> None:
    assert place(10**18, None, None, None).method == "epoch"


def test_sync_points_place_by_their_median_offset_with_the_spread_as_uncertainty() -> None:
    syncs = pl.DataFrame({"host_ts": [1000, 2010, 3000], "device_ts": [0, 1000, 2000]})
    p = place(5, None, None, syncs)
    assert (p.method, p.offset, p.uncertainty_ns) == ("timestamp_sync_point", 1000, 10)
    assert p.apply(pl.DataFrame({S.START_NS: [5]}))[S.START_NS].item() == 1005


def test_the_batch_shape_is_the_same_for_every_neuron_reader() -> None:
    empty = N.to_batch(pl.DataFrame({S.NAME: ["x"]}))
    assert empty.schema == N.BATCH_SCHEMA
    assert isinstance(empty, pa.RecordBatch) and empty.num_rows == 1


def test_two_neffs_reusing_a_flow_id_link_each_execution_to_its_own_models_op() -> None:
    """explorer_two_neff_flows: aten::mul and aten::add both carry flow id f1 (models 7
    and 9 count flows from 1 each); aten::mul is the first row with it, so a flow rule
    blind to models gives model 9's execution to aten::mul."""
    df = pl.from_arrow(neurontrace.load(FIX / "explorer_two_neff_flows"))
    assert isinstance(df, pl.DataFrame)
    first_f1 = df.filter(pl.col(S.FLOW_IDS).list.contains("neuron:f1")).sort(S.ROW).row(
        0, named=True)
    assert first_f1[S.NAME] == "aten::mul"
    names = dict(df.select(S.ROW, S.NAME).iter_rows())
    runs = df.filter(pl.col(S.NAME) == "nc_exec_running").sort(S.START_NS)
    got = [(r[S.MODEL_ID], names.get(r[S.FRAMEWORK_ROW]), r[S.LINK])
           for r in runs.iter_rows(named=True)]
    assert got == [(7, "aten::mul", "flow"), (7, "aten::mul", "flow"),
                   (9, "aten::add", "flow"), (7, "aten::mul", "flow")]
    # model 7's f1 is the first aten::mul, its f2 the second
    assert runs[S.FRAMEWORK_ROW].to_list()[:2] == [first_f1[S.ROW]] * 2
    assert runs[S.FRAMEWORK_ROW][3] != first_f1[S.ROW]
