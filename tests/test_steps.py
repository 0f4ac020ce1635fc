"""Steps: each ProfilerStep's wall time = device busy + idle by cause + host only."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from neurontrace.analyses import steps

from synthetic import dev, op, rt, table


def step(n: int, start: int, dur: int) -> dict[str, object]:
    return op(f"ProfilerStep#{n}", start, dur, category="user_annotation")


def test_a_step_splits_into_host_only_busy_and_idle() -> None:
    # step     |0 ............................................ 100|
    # device             |20 busy 40|-- idle 20 --|60 busy 80|
    # host     [op 0-60 ..............................]
    # (``step`` is filled by the assembler in real tables; here by hand.)
    lf = table(step(1, 0, 100), op("aten::mul", 0, 60, step=1),
               dev("a", 20, 20, framework_row=1), dev("b", 60, 20, framework_row=1))
    s = steps(lf).row(0, named=True)
    assert (s["step"], s["wall_ns"], s["busy_ns"], s["idle_ns"], s["host_only_ns"]) == (
        1, 100, 40, 20, 40
    )
    assert s["host_dispatch_ns"] == 20
    assert s["launches"] == 2


def test_a_gap_straddling_two_steps_is_split_between_them() -> None:
    lf = table(step(1, 0, 50), step(2, 50, 50),
               dev("a", 10, 20), dev("b", 70, 20), rt("cudaDeviceSynchronize", 30, 40))
    got = steps(lf).select("step", "busy_ns", "sync_ns", "host_only_ns").rows()
    assert got == [(1, 20, 20, 10), (2, 20, 20, 10)]


def test_all_device_tracks_of_a_rank_count_as_one_device() -> None:
    lf = table(step(1, 0, 100), dev("a", 0, 50, track="nc 0"), dev("b", 40, 60, track="nc 1"))
    s = steps(lf).row(0, named=True)
    assert (s["busy_ns"], s["idle_ns"], s["host_only_ns"]) == (100, 0, 0)


def test_launches_count_in_the_step_of_the_op_that_made_them() -> None:
    # the work of step 1's op runs after step 1 has ended: it is still step 1's launch
    lf = table(step(1, 0, 50), step(2, 50, 50), op("aten::mul", 10, 10, step=1),
               dev("a", 60, 10, framework_row=2, step=2))
    assert steps(lf).select("step", "launches").rows() == [(1, 1), (2, 0)]


def test_a_cpu_only_step_is_all_host() -> None:
    s = steps(table(step(3, 0, 100), op("aten::mm", 10, 50))).row(0, named=True)
    assert (s["busy_ns"], s["idle_ns"], s["host_only_ns"], s["launches"]) == (0, 0, 100, 0)


def test_no_steps_no_rows() -> None:
    assert steps(table(op("aten::mm", 0, 10))).height == 0


@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 60)), max_size=20),
       st.lists(st.integers(1, 150), min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_every_step_adds_up(work: list[tuple[int, int]], lengths: list[int]) -> None:
    rows, t = [], 0
    for n, d in enumerate(lengths):
        rows.append(step(n, t, d))
        t += d
    rows += [dev("k", s, d) for s, d in work]
    for s in steps(table(*rows)).iter_rows(named=True):
        causes = sum(s[f"{c}_ns"] for c in ("h2d_copy", "sync", "launch_latency",
                                            "host_dispatch", "unknown"))
        assert causes == s["idle_ns"]
        assert s["busy_ns"] + s["idle_ns"] + s["host_only_ns"] == s["wall_ns"]
        assert min(s["busy_ns"], s["idle_ns"], s["host_only_ns"]) >= 0
