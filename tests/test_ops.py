"""Op share: the key_averages view (host) and the device view, on tiny synthetic tables."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neurontrace.analyses import ops
from neurontrace.analyses.ops import UNLINKED

from synthetic import dev, op, rt, shuffled, table


def by_name(df: pl.DataFrame) -> dict[str, tuple[int, int, int]]:
    return {n: (c, s, t) for n, c, s, t, _ in df.iter_rows()}


def test_self_time_is_duration_minus_direct_children() -> None:
    lf = table(op("aten::linear", 0, 100), op("aten::t", 10, 20), op("aten::addmm", 40, 50),
               op("aten::copy_", 50, 10))
    assert by_name(ops(lf)) == {
        "aten::linear": (1, 30, 100),
        "aten::addmm": (1, 40, 50),
        "aten::t": (1, 20, 20),
        "aten::copy_": (1, 10, 10),
    }


def test_an_op_calling_itself_as_its_only_child_is_one_call() -> None:
    # aten::div_ (Scalar) dispatches to aten::div_ (Tensor): key_averages shows one call.
    lf = table(op("aten::div_", 0, 10), op("aten::div_", 1, 7), op("aten::empty", 2, 2))
    assert by_name(ops(lf)) == {"aten::div_": (1, 8, 10), "aten::empty": (1, 2, 2)}


def test_an_op_with_two_children_of_its_name_keeps_them_as_calls() -> None:
    lf = table(op("aten::sum", 0, 10), op("aten::sum", 1, 3), op("aten::sum", 5, 3))
    assert by_name(ops(lf)) == {"aten::sum": (3, 10, 16)}


def test_a_chain_of_same_name_ops_collapses_into_the_top_one() -> None:
    lf = table(op("f", 0, 10), op("f", 1, 8), op("f", 2, 6), op("g", 3, 1))
    assert by_name(ops(lf)) == {"f": (1, 9, 10), "g": (1, 1, 1)}


def test_profiler_steps_are_one_name_as_in_key_averages() -> None:
    lf = table(op("ProfilerStep#1", 0, 10, category="user_annotation"),
               op("ProfilerStep#2", 10, 10, category="user_annotation"))
    assert by_name(ops(lf)) == {"ProfilerStep*": (2, 20, 20)}


def test_python_frames_and_runtime_calls_count_as_key_averages_counts_them() -> None:
    lf = table(op("model.py(3): forward", 0, 100, category="python_function"),
               op("aten::add", 10, 50),
               rt("cudaLaunchKernel", 20, 10, category="cuda_runtime"))
    assert by_name(ops(lf)) == {
        "model.py(3): forward": (1, 50, 100),
        "aten::add": (1, 40, 50),
        "cudaLaunchKernel": (1, 10, 10),
    }


def test_utility_ops_torch_filters_are_neither_rows_nor_children() -> None:
    lf = table(op("aten::add_", 0, 10), op("aten::is_leaf", 1, 4))
    assert by_name(ops(lf)) == {"aten::add_": (1, 10, 10)}


def test_a_span_partly_overlapping_another_is_not_its_child() -> None:
    # with_stack: a Python frame ends inside a record_function range (torch: no nesting,
    # and the enclosing frame's self time may go negative, which torch reports too).
    lf = table(op("f.py(1): run", 0, 100, category="python_function"),
               op("block", 10, 50, category="user_annotation"),
               op("f.py(2): __enter__", 5, 20, category="python_function"))
    got = by_name(ops(lf))
    assert got["block"] == (1, 50, 50)  # __enter__ started before it: not its child
    assert got["f.py(1): run"] == (1, 100 - 50 - 20, 100)


def test_threads_nest_separately() -> None:
    lf = table(op("a", 0, 100), op("b", 10, 10, tid=2, track="thread 2"))
    assert by_name(ops(lf)) == {"a": (1, 100, 100), "b": (1, 10, 10)}


def test_device_time_goes_to_the_launching_op() -> None:
    lf = table(op("aten::mul", 0, 10), op("aten::add", 10, 10),
               dev("mul_kernel", 20, 6, framework_row=0),
               dev("mul_kernel", 30, 6, framework_row=0),
               dev("add_kernel", 40, 8, framework_row=1),
               dev("orphan", 50, 4))
    got = ops(lf, layer="device")
    assert got.get_column("name").to_list() == ["aten::mul", "aten::add", UNLINKED]
    assert by_name(got) == {"aten::mul": (2, 12, 12), "aten::add": (1, 8, 8),
                            UNLINKED: (1, 4, 4)}
    assert got.get_column("share").to_list() == pytest.approx([0.5, 8 / 24, 4 / 24])


def test_one_execution_on_two_cores_is_one_launch_from_first_start_to_last_end() -> None:
    # LNC=2: the same NEFF execution appears on both physical cores.
    lf = table(op("aten::mul", 0, 10),
               dev("nc_exec_running", 20, 10, framework_row=0, execution="e1", track="nc 0"),
               dev("nc_exec_running", 21, 10, framework_row=0, execution="e1", track="nc 1"))
    assert by_name(ops(lf, layer="device")) == {"aten::mul": (1, 11, 11)}


def test_annotations_and_waits_on_device_tracks_are_not_device_time() -> None:
    lf = table(op("aten::mm", 0, 10),
               dev("gemm", 20, 10, framework_row=0),
               dev("## forward ##", 15, 30, category="gpu_user_annotation", framework_row=0),
               dev("Stream Sync", 40, 5, category="cuda_sync", framework_row=0))
    assert by_name(ops(lf, layer="device")) == {"aten::mm": (1, 10, 10)}


def test_empty_trace_gives_an_empty_table_with_the_columns() -> None:
    got = ops(table(), layer="device")
    assert got.columns == ["name", "calls", "self_ns", "total_ns", "share"]
    assert got.height == 0


# -- properties ---------------------------------------------------------------------------

@st.composite
def host_trees(draw: st.DrawFn) -> pl.LazyFrame:
    """Random well-nested host spans on two threads, with repeated names."""
    rows = []
    for tid in (1, 2):
        t = 0
        for _ in range(draw(st.integers(0, 6))):
            dur = draw(st.integers(1, 100))
            rows.append(op(draw(st.sampled_from("abc")), t, dur, tid=tid, track=f"t{tid}"))
            inner = t
            for _ in range(draw(st.integers(0, 3))):
                d = draw(st.integers(0, max(0, t + dur - inner)))
                rows.append(op(draw(st.sampled_from("abc")), inner, d, tid=tid, track=f"t{tid}"))
                inner += d
            t += dur + draw(st.integers(0, 5))
    return table(*rows)


@given(host_trees(), st.integers(0, 1000))
@settings(max_examples=60, deadline=None)
def test_op_share_is_unchanged_by_row_order(lf: pl.LazyFrame, seed: int) -> None:
    assert ops(shuffled(lf, seed)).equals(ops(lf))


@given(host_trees())
@settings(max_examples=60, deadline=None)
def test_shares_sum_to_one_and_self_never_exceeds_total(lf: pl.LazyFrame) -> None:
    got = ops(lf)
    if got.get_column("self_ns").sum() > 0:
        assert got.get_column("share").sum() == pytest.approx(1.0)
    assert (got.get_column("self_ns") <= got.get_column("total_ns")).all()
    # every span is a call unless merged into a same-named parent: calls <= spans
    assert got.get_column("calls").sum() <= lf.select(pl.len()).collect().item()


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 20),
                          st.booleans()), max_size=20), st.integers(0, 100))
@settings(max_examples=60, deadline=None)
def test_device_shares_sum_to_one_whatever_the_row_order(
    work: list[tuple[int, int, int, bool]], seed: int
) -> None:
    rows = [op(f"op{i}", 10 * i, 5) for i in range(4)]
    rows += [dev("k", 100 + s, d, framework_row=o if linked else None)
             for o, s, d, linked in work]
    lf = table(*rows)
    got = ops(lf, layer="device")
    assert got.get_column("calls").sum() == len(work)
    if got.get_column("self_ns").sum() > 0:
        assert got.get_column("share").sum() == pytest.approx(1.0)
    assert ops(shuffled(lf, seed), layer="device").equals(got)

