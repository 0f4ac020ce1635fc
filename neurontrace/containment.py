"""``torch.profiler``'s containment rule on arrays: which span is the parent of which.

One definition for both sides that need it: the conversion's nesting
(:mod:`neurontrace.table.nesting`: ``parent``, ``depth``, ``self_ns``) and the analyses'
``key_averages()`` tree (:mod:`neurontrace.analyses.ops`), which must not import the
conversion. NumPy only.
"""

from __future__ import annotations

import numpy as np


def containers(lane: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The parent of each span under ``torch.profiler``'s rule, which tolerates overlaps,
    as a position (-1: none), for spans given in containment order: by lane, start,
    longer first (then any fixed order). ``lane``: an id equal for the spans of one lane.

    The parent of a span is the *last* span before it on its lane that contains it
    (``start < p_end`` and ``end <= p_end``; a zero-length span contains nothing). A
    span that only partly overlaps another is not its child, as
    ``EventList._populate_cpu_children`` decides::

        |------ A ------|
             |------ B ------|        B partly overlaps A: parent(B) = none
               |- C -|                parent(C) = B (the last that contains it)

    That is the nearest earlier span whose end reaches ``max(end, start + 1)``: a
    "previous greater element" query, answered for all spans at once by pointer jumping:
    each span's candidate starts at the span just before it, and while the candidate
    ends too soon it is replaced by the candidate's own candidate. Everything skipped
    ends before the candidate's own need, which is at most this span's (the candidate
    starts no later and ended too soon), so no container is skipped. Memory is a few
    integers per span; rounds are about the nesting depth.
    """
    end = start + dur
    need = np.maximum(end, start + 1)
    n = len(start)
    cand = np.arange(-1, n - 1, dtype=np.int64)
    if n:
        cand[1:][lane[1:] != lane[:-1]] = -1  # the first span of a lane has none
    todo = np.nonzero(cand >= 0)[0]
    while len(todo):
        c = cand[todo]
        short = end[c] < need[todo]
        todo = todo[short]
        nxt = cand[c[short]]  # jump to the candidate's candidate (same lane or -1)
        cand[todo] = nxt
        todo = todo[nxt >= 0]
    return cand
