"""``neurontrace gaps``: device idle time per device and per track, each gap's cause."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from neurontrace import analyses
from neurontrace import schema as S
from neurontrace.analyses.gaps import DEVICE_KEYS
from neurontrace.cli.options import analysis_options, events, machine_output, rows_shown, sorted_by
from neurontrace.views import terminal as T

#: The columns of the device gaps, the table --top cuts, --sort orders and --csv prints.
COLUMNS = (*DEVICE_KEYS, "label", S.START_NS, S.DUR_NS, "cause", "before", "after")


@click.command()
@click.option("--min-gap-ns", type=click.IntRange(min=0), default=0, show_default=True,
              help="List only gaps at least this long (idle totals count every gap).")
@analysis_options(COLUMNS, top=10)
def gaps(path: Path, min_gap_ns: int, top: int, sort: str | None, as_json: bool,
         as_csv: bool) -> None:
    """Device idle time in PATH per device (GPU, NeuronCore), and its causes.

    Per device: span = its first work's start to its last work's end; busy = the union
    of its work on all its streams or queues; idle = span - busy. The same per track
    (stream, queue) follows as a detail. Each instant of idle time is charged to the first
    cause that holds then: a host-to-device copy, a synchronisation, launch latency, host
    dispatch (framework ops running, nothing launched yet), else unknown; a cause's total
    is the time it was happening, and a gap is named after the cause explaining most of
    it. The table lists the --top longest device gaps (no stream of the device busy);
    --json lists all, per device and per track (at least --min-gap-ns long), in time
    order (--sort: the gaps in that column's order). --csv prints the device gaps (every
    one, or the --top longest when --top is given).
    """
    found = analyses.gaps(events(path), min_gap_ns=min_gap_ns)
    if sort:
        found = replace(found, device_gaps=sorted_by(found.device_gaps, sort),
                               gaps=sorted_by(found.gaps, sort)
                               if sort in found.gaps.columns else found.gaps)
    if as_csv:  # the device gaps, longest first (or by --sort)
        n = rows_shown(top, True)
        longest = found.device_gaps if sort or not n else found.device_gaps.sort(
            S.DUR_NS, descending=True, maintain_order=True)
        machine_output(longest, n, as_json, as_csv)
        return
    if as_json:
        T.emit_json(T.gaps_json(found))
        return
    T.show(T.gaps(found, top, str(path), sort))
