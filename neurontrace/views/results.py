"""The computed results the renderers take: an analysis's return values, cut to size.

A renderer never reads events to compute a figure; the caller computes each analysis once
and hands the results to every renderer that shows them (the terminal and the HTML page
of ``neurontrace report --html`` show the same :class:`~neurontrace.analyses.Report`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from neurontrace.analyses.compare import ALL
from neurontrace.analyses.report import Report

__all__ = ["ALL", "Run", "cut"]


def cut(r: Report, top: int) -> Report:
    """``r`` with its ranked tables (``host_ops``, ``device_ops``, ``largest_gaps``,
    ``copies``) cut to their first ``top`` rows (0: all): what :func:`analyses.report
    <neurontrace.analyses.report>` with ``top`` returns, when ``r`` was made with a
    ``top`` at least as large."""
    if not top:
        return r
    return dataclasses.replace(
        r, host_ops=r.host_ops.head(top), device_ops=r.device_ops.head(top),
        largest_gaps=r.largest_gaps.head(top), copies=r.copies.head(top),
    )


@dataclass(frozen=True)
class Run:
    """One run as the HTML page shows it.

    ``report``: :func:`neurontrace.analyses.report` made with ``top=ALL`` (every row: the
    page cuts its tables, and draws every gap of ``report.largest_gaps`` on its
    timeline); ``events``: the run's events, whose rows the timeline draws (nothing is
    computed from them); ``findings``: :func:`neurontrace.analyses.advice.advise`'s
    findings on them as JSON records (``Finding.record()``), every one, most severe first.
    """

    name: str
    report: Report
    events: pl.LazyFrame
    findings: Sequence[Mapping[str, Any]] = ()
