"""``neurontrace copies``: every transfer (h2d, d2h, d2d, p2p), once, with the op that made it."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.analyses.copies import COLUMNS, by_direction, largest
from neurontrace.cli.options import analysis_options, events, machine_output, rows_shown, sorted_by
from neurontrace.views import terminal as T


@click.command()
@analysis_options(COLUMNS, top=20)
def copies(path: Path, top: int, sort: str | None, as_json: bool, as_csv: bool) -> None:
    """Every transfer in PATH, reported once: host to device (h2d), device to host
    (d2h), device to device (d2d) and peer to peer (p2p), each direction counted apart.

    One transfer seen as a runtime call, a DMA and a framework copy op is one row,
    listing its layers. op is the outermost framework op (what the user called), via
    the innermost; tiny marks host-to-device transfers of at most 64 bytes (a scalar
    such as eps living on the host). The table shows the copies and bytes per
    direction, a summary per op and direction, then the --top largest
    transfers by bytes (then time; all, in time order, for 0). --json prints every
    transfer in time order, or, when --top is given, the --top largest; --sort orders
    the transfers by a column instead.
    """
    found = analyses.copies(events(path))
    ordered = sorted_by(found, sort)
    n = rows_shown(top, True)
    if machine_output(ordered if sort or not n else largest(found, n), n, as_json, as_csv):
        return
    shown = (ordered.head(top) if top else ordered) if sort else largest(found, top)
    T.show(T.copies(shown, found, analyses.copy_summary(found), by_direction(found),
                    str(path), sort))
