"""``neurontrace gaps``: device idle time per track, and each gap with its cause."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from neurontrace import analysis
from neurontrace import schema as S
from neurontrace.analysis.gaps import CAUSES
from neurontrace.cli import render as R
from neurontrace.cli.options import events, json_option, path_argument, top_option, verbose_option

TRACKS = (
    R.Col("track", "track", flex=True, right=False),
    R.Col("span_ns", "span", R.duration),
    R.Col("busy_ns", "busy", R.duration),
    R.Col("idle_ns", "idle", R.duration),
    R.Col("idle_share", "idle%", R.percent),
    R.Col("gaps", "gaps", R.count),
    R.Col("causes", "idle by cause", flex=True, right=False, tail=False),
)
GAPS = (
    R.Col("track", "track", flex=True, right=False),
    R.Col("at", "at", R.duration),
    R.Col(S.DUR_NS, "gap", R.duration),
    R.Col("cause", "cause", right=False),
    R.Col("before", "before", flex=True, right=False),
    R.Col("after", "after", flex=True, right=False),
)


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
        R.emit_json({"tracks": R.records(found.tracks), "gaps": R.records(found.gaps)})
        return
    if found.tracks.height == 0:
        R.echo(f"{path}: no device work found (a CPU-only trace has no device gaps)")
        return
    tracks = found.tracks.with_columns(
        idle_share=pl.when(pl.col("span_ns") > 0)
        .then(pl.col("idle_ns") / pl.col("span_ns")),
        causes=pl.Series([causes(row) for row in found.tracks.iter_rows(named=True)],
                         dtype=pl.String),
    )
    R.echo(R.table(tracks, TRACKS))
    if found.gaps.height:
        first = found.tracks.get_column(S.START_NS).min()
        longest = found.gaps.sort(S.DUR_NS, descending=True)
        longest = (longest.head(top) if top else longest).with_columns(
            at=pl.col(S.START_NS) - first
        )
        R.echo()
        R.echo(R.heading(f"Longest gaps ({longest.height:,} of {found.gaps.height:,}; "
                         "'at' from the first device work)"))
        R.echo(R.table(longest, GAPS))


def causes(track: dict[str, object]) -> str:
    """``host dispatch 88%, launch latency 12%``: a track's idle time by cause."""
    idle = track["idle_ns"]
    assert isinstance(idle, int)
    parts = []
    for c in sorted(CAUSES, key=lambda c: -int(track[f"{c}_ns"])):  # type: ignore[call-overload]
        ns = int(track[f"{c}_ns"])  # type: ignore[call-overload]
        if ns > 0 and idle > 0:
            parts.append(f"{c.replace('_', ' ')} {R.percent(ns / idle)}")
    return ", ".join(parts) or "-"
