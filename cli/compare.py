"""``neurontrace compare``: runs side by side, with ratios to the first."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import polars as pl

from neurontrace import analyses
from neurontrace.analyses import ALL, advice
from neurontrace.analyses.advice.diff import against_first
from neurontrace.cli.options import (
    events,
    filter_options,
    json_option,
    rows_shown,
    top_option,
    verbose_option,
)
from neurontrace.convert import unique
from neurontrace.readers.inputs import stem
from neurontrace.views import findings as F
from neurontrace.views import terminal as T


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@filter_options
@top_option(5)
@json_option
@verbose_option
def compare(paths: tuple[Path, ...], top: int, as_json: bool) -> None:
    """Compare runs A B [C ...] (traces, run folders, or what convert wrote).

    The median step time (step_ns, over ProfilerStep#N spans; a run without steps shows
    its whole-trace wall time, labelled), then wall, host and device time, launches,
    device idle time, copies and the top ops of each run, with each figure's ratio to the
    first run's (below 1: less than the first). When no run has device work, the device
    rows are left out (host only). Then the findings (neurontrace advise) that
    disappeared or appeared in each run against the first. --json prints {"metrics":
    one {metric, run, value, ratio} object per figure and run, "findings": one {run,
    against, rule, ops, change, title, severity, before, after} object per finding of
    either run (change: disappeared, appeared or kept; before/after: {low, high} ns per
    step, null where absent)}.
    """
    lfs = {label: events(p) for label, p in zip(labels(paths), paths, strict=True)}
    runs = {label: analyses.measure(lf) for label, lf in lfs.items()}
    table = analyses.compare_results(runs, top=rows_shown(top, as_json) or ALL)
    found = findings_between(lfs, runs)
    if as_json:
        T.emit_json({"metrics": T.records(table), "findings": found})
        return
    T.show(T.compare(table, list(runs)))
    if len(runs) > 1:
        T.echo()
        T.show(F.changes(found, list(runs)))


def findings_between(lfs: Mapping[str, pl.LazyFrame], runs: Mapping[str, analyses.Measured]
                     ) -> list[dict[str, Any]]:
    """Each run's findings (:func:`.advice.advise`, given the report and wall time
    :func:`.compare.measure` computed: nothing twice) against the first run's
    (:func:`.advice.diff.against_first`)."""
    found = {label: advice.advise(lfs[label], m.report, m.wall_ns) for label, m in runs.items()}
    return against_first(found)


def labels(paths: tuple[Path, ...]) -> list[str]:
    """Short, unique run names: file names without extensions, or, when those repeat
    (``naive/events.parquet``, ``compiled/events.parquet``), the folders' names."""
    stems = [stem(p) for p in paths]
    if len(set(stems)) < len(stems):
        parents = [p.resolve().parent.name for p in paths]
        if len(set(parents)) == len(parents) and all(parents):
            return parents
    taken: set[str] = set()
    return [unique(name or str(p), taken) for p, name in zip(paths, stems, strict=True)]
