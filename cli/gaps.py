"""``neurontrace gaps``: device idle time per track, and each gap with its cause."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analysis
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
    """Device idle time in PATH per device track (GPU stream, NeuronCore), and its causes.

    span = first device start to last device end; busy = union of device work; idle =
    span - busy. Each gap is charged to what overlaps it most: a host-to-device copy, a
    synchronisation, launch latency, host dispatch (framework ops running, nothing
    launched yet) or unknown. The table lists the --top longest gaps; --json lists all
    (at least --min-gap-ns long) in time order.
    """
    found = analysis.gaps(events(path), min_gap_ns=min_gap_ns)
    if as_json:
        T.emit_json(T.gaps_json(found))
        return
    T.show(T.gaps(found, top, str(path)))
