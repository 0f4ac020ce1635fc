"""``neurontrace convert``."""

from __future__ import annotations

from pathlib import Path

import click

import neurontrace
from neurontrace.cli.options import verbose_option
from neurontrace.cli.progress import Bar
from neurontrace.readers import READERS


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(sorted(READERS)), default=None,
    help="Input format, instead of detecting it.",
)
@click.option("--rank", type=int, default=None, help="Rank to record, instead of the trace's.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@verbose_option
@click.pass_context
def convert(ctx: click.Context, inputs: tuple[Path, ...], out: Path, fmt: str | None,
            rank: int | None, progress: bool | None) -> None:
    """Convert INPUTS (traces, or folders of them) to Parquet at OUT.

    One input file writes one Parquet file. Several inputs, or a folder, write a dataset
    folder partitioned by rank (OUT/rank=N/NAME.parquet). The output appears only when
    complete; inputs are never modified.
    """
    verbose = (ctx.obj or {}).get("verbose", 0)
    bar = Bar("converting", progress)
    try:
        result = neurontrace.convert(list(inputs) if len(inputs) > 1 else inputs[0], out,
                                     fmt=fmt, rank=rank, progress=bar)
    finally:
        bar.close()
    d = result.diagnostics
    warned = sum(d.counts.values())
    click.echo(
        f"{out}: {result.rows:,} events from {len(result.inputs)} input(s)"
        + (f", {warned:,} warning(s) (see -v)" if warned and not verbose else ""),
        err=True,
    )
    if verbose:
        for line in d.lines():
            click.echo(f"  warning: {line}", err=True)
        for f in result.skipped:
            click.echo(f"  skipped (no known format): {f}", err=True)
