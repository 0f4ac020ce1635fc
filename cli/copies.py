"""``neurontrace copies``: every host <-> device transfer, once, with the op that made it."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from neurontrace import analysis
from neurontrace import schema as S
from neurontrace.cli import render as R
from neurontrace.cli.options import events, json_option, path_argument, top_option, verbose_option

TRANSFERS = (
    R.Col("at", "at", R.duration),
    R.Col(S.DUR_NS, "dur", R.duration),
    R.Col("bytes", "bytes", R.nbytes),
    R.Col("direction", "dir", right=False),
    R.Col("tiny", "tiny"),
    R.Col("op", "op", flex=True, right=False),
    R.Col("via", "via", flex=True, right=False),
    R.Col("layers", "layers", right=False),
)
SUMMARY = (
    R.Col("op", "op", flex=True, right=False),
    R.Col("direction", "dir", right=False),
    R.Col("copies", "copies", R.count),
    R.Col("bytes", "bytes", R.nbytes),
    R.Col(S.DUR_NS, "time", R.duration),
    R.Col("tiny", "tiny", R.count),
)


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
        R.emit_json(R.records(found))
        return
    if found.height == 0:
        R.echo(f"{path}: no transfers between host and device found")
        return
    R.echo(R.heading(f"Per op ({found.height:,} transfers)"))
    R.echo(R.table(analysis.copy_summary(found), SUMMARY))
    shown = (found.head(top) if top else found).with_columns(
        at=pl.col(S.START_NS) - found.get_column(S.START_NS).min()
    )
    R.echo()
    R.echo(R.heading(f"Transfers (first {shown.height:,}; 'at' from the first)"))
    R.echo(R.table(shown, TRANSFERS))
