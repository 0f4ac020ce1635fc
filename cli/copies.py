"""``neurontrace copies``: every host <-> device transfer, once, with the op that made it."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analysis
from neurontrace.cli.options import events, json_option, path_argument, top_option, verbose_option
from neurontrace.views import terminal as T


@click.command()
@path_argument
@top_option(20)
@json_option
@verbose_option
def copies(path: Path, top: int, as_json: bool) -> None:
    """Every transfer between host and device in PATH, reported once.

    One transfer seen as a runtime call, a DMA and a framework copy op is one row,
    listing its layers. op is the outermost framework op (what the user called), via
    the innermost; tiny marks transfers of at most 64 bytes (a scalar such as eps
    living on the host). --json prints every transfer; the table shows the first
    --top and a summary per op.
    """
    found = analysis.copies(events(path))
    if as_json:
        T.emit_json(T.records(found))
        return
    T.show(T.copies(found, analysis.copy_summary(found), top, str(path)))
