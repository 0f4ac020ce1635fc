"""``neurontrace gaps``: device idle time per device and per track, each gap's cause."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.cli.options import events, json_option, path_argument, top_option, verbose_option
from neurontrace.views import terminal as T


@click.command()
@path_argument
@click.option("--min-gap-ns", type=click.IntRange(min=0), default=0, show_default=True,
              help="List only gaps at least this long (idle totals count every gap).")
@top_option(10)
@json_option
@verbose_option
def gaps(path: Path, min_gap_ns: int, top: int, as_json: bool) -> None:
    """Device idle time in PATH per device (GPU, NeuronCore), and its causes.

    Per device: span = its first work's start to its last work's end; busy = the union
    of its work on all its streams or queues; idle = span - busy. The same per track
    (stream, queue) follows as a detail. Each instant of idle time is charged to the first
    cause that holds then: a host-to-device copy, a synchronisation, launch latency, host
    dispatch (framework ops running, nothing launched yet), else unknown; a cause's total
    is the time it was happening, and a gap is named after the cause explaining most of
    it. The table lists the --top longest device gaps (no stream of the device busy);
    --json lists all, per device and per track (at least --min-gap-ns long), in time
    order.
    """
    found = analyses.gaps(events(path), min_gap_ns=min_gap_ns)
    if as_json:
        T.emit_json(T.gaps_json(found))
        return
    T.show(T.gaps(found, top, str(path)))
