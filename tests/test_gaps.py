"""Gap analysis: span, busy, idle per device track, and the cause of each gap."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from neurontrace.analyses import gaps

from synthetic import dev, op, rt, table

# Two pieces of device work with a 40 ns gap between them: [10, 50).
A = dev("A", 0, 10)
B = dev("B", 50, 10, correlation=7)


def only_gap(*rows: dict[str, object]) -> dict[str, object]:
    found = gaps(table(*rows)).gaps
    assert found.height == 1
    return found.row(0, named=True)


def test_span_busy_idle_of_a_track() -> None:
    t = gaps(table(A, B, dev("C", 55, 20))).tracks.row(0, named=True)
    assert (t["span_ns"], t["busy_ns"], t["idle_ns"], t["gaps"]) == (75, 35, 40, 1)


def test_a_gap_names_the_work_on_either_side() -> None:
    g = only_gap(A, dev("A2", 2, 8), B)
    assert (g["start_ns"], g["dur_ns"], g["before"], g["after"]) == (10, 40, "A", "B")


def test_host_dispatch_framework_op_running_nothing_launched_yet() -> None:
    # device  |A|------------------------------|B|
    # host      [aten::mul ..............][launch B]
    g = only_gap(A, B, op("aten::mul", 5, 40), rt("cudaLaunchKernel", 45, 3, correlation=7))
    assert g["cause"] == "host_dispatch"


def test_launch_latency_launch_issued_work_not_started() -> None:
    # device  |A|------------------------------|B|
    # host      [launch B]
    g = only_gap(A, B, rt("cudaLaunchKernel", 8, 4, correlation=7))
    assert g["cause"] == "launch_latency"


def test_launch_found_through_a_flow_arrow_as_neuron_links_them() -> None:
    b = dev("nc_exec_running", 50, 10, flow_ids=["neuron:1"])
    g = only_gap(A, b, rt("nrt_execute", 9, 2, flow_ids=["neuron:1"]))
    assert g["cause"] == "launch_latency"


def test_host_to_device_copy_in_progress() -> None:
    g = only_gap(A, B, op("aten::add", 5, 45), rt("nrt_tensor_write", 10, 38, bytes=4))
    assert g["cause"] == "h2d_copy"


def test_a_device_to_host_copy_is_not_a_reason_to_wait() -> None:
    g = only_gap(A, B, rt("nrt_tensor_read", 10, 38))
    assert g["cause"] == "unknown"


def test_waiting_on_a_synchronisation() -> None:
    g = only_gap(A, B, rt("cudaStreamSynchronize", 10, 40, category="cuda_runtime"))
    assert g["cause"] == "sync"


def test_neuron_host_blocked_waiting_on_the_device() -> None:
    assert only_gap(A, B, rt("kbl_exec_wait", 10, 40))["cause"] == "sync"


def test_nothing_overlapping_is_unknown() -> None:
    assert only_gap(A, B)["cause"] == "unknown"


def test_the_cause_covering_most_of_the_gap_wins() -> None:
    g = only_gap(A, B, op("aten::mul", 10, 30), rt("cudaDeviceSynchronize", 40, 10))
    assert g["cause"] == "host_dispatch"


def test_ties_go_to_the_copy() -> None:
    g = only_gap(A, B, op("aten::mul", 10, 40), rt("nrt_tensor_write", 10, 40))
    assert g["cause"] == "h2d_copy"


def test_other_ranks_do_not_explain_a_gap() -> None:
    assert only_gap(A, B, op("aten::mul", 10, 40, rank=1, track="r1"))["cause"] == "unknown"


def test_overlapping_and_touching_work_leaves_no_gap() -> None:
    found = gaps(table(dev("a", 0, 10), dev("b", 5, 10), dev("c", 15, 5)))
    assert found.gaps.height == 0
    assert found.tracks.row(0, named=True)["idle_ns"] == 0


def test_tracks_are_separate_and_annotations_are_not_work() -> None:
    found = gaps(table(A, B, dev("k", 20, 10, track="nc 1"),
                       dev("## fwd ##", 0, 100, category="gpu_user_annotation")))
    assert found.tracks.get_column("track").to_list() == ["nc 0", "nc 1"]
    assert found.tracks.get_column("idle_ns").to_list() == [40, 0]


def test_min_gap_lists_long_gaps_but_idle_counts_all() -> None:
    found = gaps(table(dev("a", 0, 10), dev("b", 12, 10), dev("c", 100, 1)), min_gap_ns=10)
    assert found.gaps.get_column("dur_ns").to_list() == [78]
    t = found.tracks.row(0, named=True)
    assert (t["idle_ns"], t["gaps"], t["unknown_ns"]) == (80, 1, 80)


def test_a_host_only_trace_has_no_tracks() -> None:
    found = gaps(table(op("aten::mm", 0, 10)))
    assert found.tracks.height == 0 and found.gaps.height == 0


# -- properties ---------------------------------------------------------------------------

intervals = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), max_size=25)


@given(intervals, intervals, intervals, st.integers(0, 30))
@settings(max_examples=80, deadline=None)
def test_busy_plus_idle_is_span_and_gaps_never_overlap(
    nc0: list[tuple[int, int]], nc1: list[tuple[int, int]], host: list[tuple[int, int]],
    min_gap: int,
) -> None:
    rows = [dev("k", s, d, track="nc 0") for s, d in nc0]
    rows += [dev("k", s, d, track="nc 1") for s, d in nc1]
    rows += [op("aten::x", s, d) for s, d in host]
    found = gaps(table(*rows), min_gap_ns=min_gap)
    everything = gaps(table(*rows))
    for t in found.tracks.iter_rows(named=True):
        assert t["busy_ns"] + t["idle_ns"] == t["span_ns"]
        assert t["busy_ns"] >= 0 and t["idle_ns"] >= 0
        assert sum(t[f"{c}_ns"] for c in ("h2d_copy", "sync", "launch_latency",
                                          "host_dispatch", "unknown")) == t["idle_ns"]
    all_gaps = everything.gaps
    assert (all_gaps.get_column("dur_ns") > 0).all()
    per_track = all_gaps.group_by("track").agg(pl.col("dur_ns").sum())
    idle = dict(everything.tracks.select("track", "idle_ns").iter_rows())
    assert dict(per_track.iter_rows()) == {k: v for k, v in idle.items() if v}
    for _, g in all_gaps.group_by("track"):
        g = g.sort("start_ns")
        ends = (g.get_column("start_ns") + g.get_column("dur_ns")).to_list()
        assert all(e <= s for e, s in zip(ends, g.get_column("start_ns").to_list()[1:],
                                          strict=False))
    for g in all_gaps.iter_rows(named=True):  # no work inside a gap
        work = nc0 if g["track"] == "nc 0" else nc1
        assert not any(s < g["start_ns"] + g["dur_ns"] and s + d > g["start_ns"]
                       for s, d in work if d > 0)
    assert (found.gaps.get_column("dur_ns") >= max(min_gap, 1)).all()
