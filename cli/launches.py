"""``neurontrace launches``: launch calls, their device work and the delay between."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses as A
from neurontrace.analyses.launches import SUMMARY_COLUMNS
from neurontrace.cli.options import analysis_options, events, machine_output, rows_shown, sorted_by
from neurontrace.views import launches as V
from neurontrace.views import terminal as T


@click.command()
@analysis_options(SUMMARY_COLUMNS, top=10)
def launches(path: Path, top: int, sort: str | None, as_json: bool, as_csv: bool) -> None:
    """Launch statistics of PATH (a trace, a run folder, or what convert wrote), as
    HolisticTraceAnalysis' kernel launch stats: each runtime call that launched device
    work (joined by correlation, else by flow), its host time, the work's device time,
    and the launch delay (call start to device start).

    Per kernel name and per launching op: launches, mean, median, p95 and max delay,
    short launches (device time under the call's own time) and outliers (call over 50
    µs or delay over 100 µs); then the outliers, longest delay first; then the time of
    each record_function range on the device (gpu_user_annotation). Most launches
    first (--sort: the per-kernel and per-op tables by that column).
    --json prints {kernels, ops, outliers, annotations}, every row unless --top is
    given; --csv prints the per-kernel table.
    """
    lf = events(path)
    table = A.launches(lf)
    kernels = sorted_by(A.launch_summary(table, "name"), sort)
    if as_csv:
        machine_output(kernels, rows_shown(top, True), as_json, as_csv)
        return
    tables = {
        "kernels": kernels,
        "ops": sorted_by(A.launch_summary(table, "op"), sort),
        "outliers": A.outliers(table),
        "annotations": A.device_annotations(lf),
    }
    if as_json:
        T.emit_json(V.as_json(tables, rows_shown(top, as_json)))
        return
    T.show(V.launches(tables, top, str(path)))
