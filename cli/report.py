"""``neurontrace report``: the three answers in plain words, on one screen."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import polars as pl

from neurontrace import analyses
from neurontrace.analyses import advice
from neurontrace.analyses.advice.diff import against_first
from neurontrace.cli.compare import labels
from neurontrace.cli.options import (
    events,
    filter_options,
    json_option,
    rows_shown,
    top_option,
    verbose_option,
)
from neurontrace.io import atomic
from neurontrace.views import findings as F
from neurontrace.views import html
from neurontrace.views import terminal as T
from neurontrace.views.results import ALL, Run, cut


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@filter_options
@top_option(5)
@click.option("--html", "html_out", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Also write one self-contained HTML page (timeline, op "
              "share, idle time by cause, copies; with several PATHS, their comparison).")
@click.option("--max-events", type=click.IntRange(min=1), default=html.MAX_EVENTS,
              show_default=True, help="Timeline events the HTML page embeds per run.")
@json_option
@verbose_option
def report(paths: tuple[Path, ...], top: int, html_out: Path | None, max_events: int,
           as_json: bool) -> None:
    """Op share, device idle time, copies and findings in PATHS, in plain words.

    e.g. "aten::mul: 85.2% of device time, 3 launches per step". The findings are those
    of neurontrace advise (the --top most severe), from the same computed results.
    --json prints the tables behind the words, with "findings" as advise --json gives
    them (a list with several PATHS). --html OUT.html writes the same as a page that
    needs no network; with several PATHS, with their comparison and the findings that
    disappeared or appeared in each run against the first, as compare shows them.
    --step, --rank and --window narrow each run alike before anything is computed (a
    step or rank a run lacks is refused, naming it).
    """
    if html_out is not None:  # before anything is read: never over an input
        atomic.refuse_overlap(paths, html_out)
        atomic.check_output(html_out)
    runs, changed = analysed({label: events(p)  # raw: cached; narrowed by the filters
                              for label, p in zip(labels(paths), paths, strict=True)})
    if html_out is not None:
        page_top = max(top, 10) if top else ALL
        comparison = compared(runs, page_top) if len(runs) > 1 else None
        html.write(runs, html_out, comparison, top=page_top, max_events=max_events,
                   changes=changed)
        click.echo(f"{html_out}: report of {len(runs)} run(s)", err=True)
    n = rows_shown(top, as_json)
    reports = [cut(run.report, n) for run in runs]
    if as_json:
        docs = [{**T.report_json(r), "findings": list(run.findings[:n] if n else run.findings)}
                for r, run in zip(reports, runs, strict=True)]
        T.emit_json(docs[0] if len(docs) == 1 else docs)
        return
    for i, (path, r, run) in enumerate(zip(paths, reports, runs, strict=True)):
        if i:
            T.echo()
        lines = T.report(r, str(path))
        T.show([*lines, ""] if lines and lines[-1] else lines)
        T.show(F.part(run.findings[:n] if n else run.findings, len(run.findings)))


def analysed(events: Mapping[str, pl.LazyFrame]) -> tuple[list[Run], list[dict[str, Any]]]:
    """Each run's :func:`neurontrace.analyses.report`, computed once with every row, and
    its findings (:func:`.advice.advise`, given the report: nothing computed twice): the
    terminal and the HTML page both show (a cut of) them; and the findings that appeared,
    disappeared or stayed in each run against the first
    (:func:`.advice.diff.against_first`, as ``compare`` gives them; none for one run),
    from the same findings."""
    runs, found = [], {}
    for name, lf in events.items():
        r = analyses.report(lf, top=ALL)
        found[name] = advice.advise(lf, r)
        runs.append(Run(name, r, lf, [f.record() for f in found[name]]))
    return runs, against_first(found)


def compared(runs: list[Run], top: int) -> pl.DataFrame:
    """:func:`neurontrace.analyses.compare_results` of the runs' reports (each computed
    once, with every row) and their wall time and steps."""
    return analyses.compare_results(
        {run.name: analyses.Measured(run.report, *analyses.extent(run.events)) for run in runs},
        top=top)
