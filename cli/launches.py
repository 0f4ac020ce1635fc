"""``neurontrace launches``: launch calls, their device work and the delay between."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses as A
from neurontrace.cli.options import (
    events,
    json_option,
    path_argument,
    rows_shown,
    top_option,
    verbose_option,
)
from neurontrace.views import launches as V
from neurontrace.views import terminal as T


@click.command()
@path_argument
@top_option(10)
@json_option
@verbose_option
def launches(path: Path, top: int, as_json: bool) -> None:
    """Launch statistics of PATH (a trace, a run folder, or what convert wrote), as
    HolisticTraceAnalysis' kernel launch stats: each runtime call that launched device
    work (joined by correlation), its host time, the work's device time, and the launch
    delay (call start to device start).

    Per kernel name and per launching op: launches, mean, median, p95 and max delay,
    short launches (device time under the call's own time) and outliers (call over 50
    µs or delay over 100 µs); then the outliers, longest delay first; then the time of
    each record_function range on the device (gpu_user_annotation).
    --json prints {kernels, ops, outliers, annotations}, every row unless --top is given.
    """
    lf = events(path)
    table = A.launches(lf)
    tables = {
        "kernels": A.launch_summary(table, "name"),
        "ops": A.launch_summary(table, "op"),
        "outliers": A.outliers(table),
        "annotations": A.device_annotations(lf),
    }
    if as_json:
        T.emit_json(V.as_json(tables, rows_shown(top, as_json)))
        return
    T.show(V.launches(tables, top, str(path)))
