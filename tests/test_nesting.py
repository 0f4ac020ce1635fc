"""parent / depth / self time: the vectorised nesting agrees with a plain stack."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from neurontrace.table.nesting import nest


def stack_reference(spans: list[tuple[int, int, int, int]]) -> dict[int, tuple]:
    """(row, lane, start, dur) -> {row: (parent, depth, self)}, as torch's profiler does it
    (``EventList._populate_cpu_children``): a stack in (start, longer first) order, where
    a span that cannot contain the next one (it ended, or it ends too soon) is popped."""
    out: dict[int, tuple] = {}
    by_lane: dict[int, list] = {}
    for s in spans:
        by_lane.setdefault(s[1], []).append(s)
    for lane_spans in by_lane.values():
        lane_spans.sort(key=lambda s: (s[2], -s[3], s[0]))
        stack: list[tuple[int, int, int]] = []  # (end, row, depth)
        for row, _, start, dur in lane_spans:
            end = start + dur
            while stack and (start >= stack[-1][0] or end > stack[-1][0]):
                stack.pop()
            parent, depth = (stack[-1][1], stack[-1][2] + 1) if stack else (None, 0)
            out[row] = (parent, depth, dur)
            stack.append((end, row, depth))
    for row, _, _, dur in spans:
        parent = out[row][0]
        if parent is not None:
            p, d, self_ = out[parent]
            out[parent] = (p, d, self_ - dur)
    return {k: (p, d, max(0, s)) for k, (p, d, s) in out.items()}


@st.composite
def well_nested(draw: st.DrawFn) -> list[tuple[int, int, int, int]]:
    spans: list[tuple[int, int, int, int]] = []

    def fill(lane: int, lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi and len(spans) < 60:
            a = draw(st.integers(t, hi))
            b = draw(st.integers(a, hi))
            spans.append((len(spans), lane, a, b - a))
            if b > a and depth < 4 and draw(st.booleans()):
                fill(lane, a, b, depth + 1)
            t = b + draw(st.integers(0, 3))
            if draw(st.integers(0, 3)) == 0:
                break

    for lane in range(draw(st.integers(1, 3))):
        fill(lane, 0, 1000, 0)
    return spans


def run(spans: list[tuple[int, int, int, int]]) -> dict[int, tuple]:
    df = pl.DataFrame(spans, schema=["row", "lane", "start", "dur"], orient="row")
    out, _ = nest(df.with_columns(covered=pl.lit(0, pl.Int64), old=False))  # none nested before
    cols = out.select("row", "parent", "depth", "self_ns")
    return {r: (p, d, s) for r, p, d, s in cols.iter_rows()}


@settings(max_examples=150, deadline=None)
@given(well_nested())
def test_vectorised_matches_stack_on_nested_spans(spans: list) -> None:
    if spans:
        assert run(spans) == stack_reference(spans)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30)), min_size=1, max_size=40))
def test_partly_overlapping_spans_follow_torch(pairs: list) -> None:
    spans = [(i, 0, s, d) for i, (s, d) in enumerate(pairs)]
    got = run(spans)
    assert got == stack_reference(spans)
    assert all(s >= 0 for _, _, s in got.values())


def test_a_span_that_outlives_its_would_be_parent_is_not_its_child() -> None:
    spans = [(0, 0, 0, 10), (1, 0, 2, 10), (2, 0, 3, 2)]  # 1 overlaps 0 partly
    assert run(spans) == {0: (None, 0, 10), 1: (None, 0, 8), 2: (1, 1, 2)}


def test_ties_adjacent_and_zero_length() -> None:
    spans = [
        (0, 0, 0, 10),  # outer
        (1, 0, 0, 4),  # starts with the outer, shorter: inside it
        (2, 0, 4, 6),  # starts when 1 ends: sibling of 1
        (3, 0, 4, 0),  # zero length at 4: inside 2 (2 is open at 4), contains nothing
        (4, 0, 10, 1),  # starts when the outer ends: top level
    ]
    assert run(spans) == {
        0: (None, 0, 0),
        1: (0, 1, 4),
        2: (0, 1, 6),
        3: (2, 2, 0),
        4: (None, 0, 1),
    }
