"""``neurontrace copies``: every transfer (h2d, d2h, d2d, p2p), once, with the op that made it."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.analyses.copies import by_direction, largest
from neurontrace.cli.options import (
    events,
    json_option,
    path_argument,
    rows_shown,
    top_option,
    verbose_option,
)
from neurontrace.views import terminal as T


@click.command()
@path_argument
@top_option(20)
@json_option
@verbose_option
@click.pass_context
def copies(ctx: click.Context, path: Path, top: int, as_json: bool) -> None:
    """Every transfer in PATH, reported once: host to device (h2d), device to host
    (d2h), device to device (d2d) and peer to peer (p2p), each direction counted apart.

    One transfer seen as a runtime call, a DMA and a framework copy op is one row,
    listing its layers. op is the outermost framework op (what the user called), via
    the innermost; tiny marks host-to-device transfers of at most 64 bytes (a scalar
    such as eps living on the host). The table shows the copies and bytes per
    direction, a summary per op and direction, then the --top largest
    transfers by bytes (then time; all, in time order, for 0). --json prints every
    transfer in time order, or, when --top is given, the --top largest.
    """
    found = analyses.copies(events(path))
    if as_json:
        n = rows_shown(top, as_json)
        T.emit_json(T.records(largest(found, n) if n else found))
        return
    T.show(T.copies(largest(found, top), found, analyses.copy_summary(found),
                    by_direction(found), str(path)))
