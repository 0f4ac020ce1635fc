"""nesting.nest's parents: torch's parent rule, vectorised, against torch's own stack loop."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from neurontrace.table.nesting import nest


def torch_parents(spans: list[tuple[int, int, int, int]]) -> dict[int, int | None]:
    """EventList._populate_cpu_children, transcribed: sort by (start, -end), keep a
    stack, pop parents that end before the event starts or that it outlives."""
    out: dict[int, int | None] = {}
    for lane in {s[1] for s in spans}:
        mine = sorted((s for s in spans if s[1] == lane),
                      key=lambda s: (s[2], -(s[2] + s[3]), s[0]))
        stack: list[tuple[int, int, int]] = []  # (row, start, end)
        for row, _, start, dur in mine:
            end = start + dur
            out[row] = None
            while stack:
                p = stack[-1]
                if start >= p[2] or end > p[2]:
                    stack.pop()
                else:
                    out[row] = p[0]
                    break
            stack.append((row, start, end))
    return out


def parents(spans: list[tuple[int, int, int, int]]) -> dict[int, int | None]:
    df = pl.DataFrame(spans, schema=["row", "lane", "start", "dur"], orient="row")
    tree, _ = nest(df.with_columns(covered=pl.lit(0, pl.Int64), old=False))
    return dict(tree.select("row", "parent").iter_rows())


def test_a_partly_overlapping_span_is_nobodys_child() -> None:
    assert parents([(0, 0, 0, 10), (1, 0, 5, 10), (2, 0, 6, 2)]) == {0: None, 1: None, 2: 1}


def test_equal_spans_nest_in_row_order_and_zero_length_spans_contain_nothing() -> None:
    assert parents([(0, 0, 0, 10), (1, 0, 0, 10), (2, 0, 3, 0), (3, 0, 3, 0)]) == {
        0: None, 1: 0, 2: 1, 3: 1
    }


def test_a_zero_length_span_at_a_parents_end_is_outside_it() -> None:
    assert parents([(0, 0, 0, 10), (1, 0, 10, 0)]) == {0: None, 1: None}


spans = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 60), st.sampled_from([0, 1, 2, 5, 9, 20, 40])),
    max_size=40,
).map(lambda xs: [(i, lane, s, d) for i, (lane, s, d) in enumerate(xs)])


@given(spans)
@settings(max_examples=300, deadline=None)
def test_same_parents_as_torchs_loop(xs: list[tuple[int, int, int, int]]) -> None:
    assert parents(xs) == torch_parents(xs)
