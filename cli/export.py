"""``neurontrace export``: the merged timeline as Chrome-trace JSON (Perfetto, chrome://tracing)."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.cli.options import json_option, path_argument, verbose_option
from neurontrace.cli.progress import Bar
from neurontrace.diagnostics import Diagnostics
from neurontrace.io import atomic
from neurontrace.io.scratch import Terminated, sigterm_raises
from neurontrace.loading import cache_folder
from neurontrace.views import chrome
from neurontrace.views import terminal as T


@click.command()
@path_argument
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--marks/--no-marks", default=True, show_default=True,
              help="Add tracks marking device idle gaps (by cause) and copies.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@json_option
@verbose_option
@click.pass_context
def export(ctx: click.Context, path: Path, out: Path, marks: bool, progress: bool | None,
           as_json: bool) -> None:
    """Write PATH's framework, runtime and device events to OUT as one Chrome trace.

    Open OUT in Perfetto UI (ui.perfetto.dev, works offline once loaded) or
    chrome://tracing: one process per host process and per GPU / NeuronCore, a thread
    per framework thread, stream or queue, arrows from each op to its runtime calls and
    device work, and tracks marking idle gaps (by cause) and copies. An OUT named
    *.gz (OUT.json.gz) is gzip-compressed, which both open as well. neurontrace reads
    OUT back with every column intact.
    """
    atomic.refuse_overlap([path], out)
    atomic.check_output(out)
    diag = Diagnostics()
    lf = analyses.events(path, diag=diag, cache=cache_folder())  # a raw trace: cached
    bar = Bar("exporting", progress, unit="events", scale=1)
    with sigterm_raises():
        try:
            shown = chrome.Marks(analyses.gaps(lf).gaps, analyses.copies(lf)) if marks else None
            done = chrome.export(lf, out, marks=shown, progress=bar)
        except Terminated:
            click.echo("neurontrace: terminated (SIGTERM)", err=True)
            ctx.exit(Terminated.exit_code)
        finally:
            bar.close()
    T.warnings(diag, (ctx.obj or {}).get("verbose", 0))
    if as_json:
        T.emit_json({"path": str(done.path), "rows": done.rows, "flows": done.flows,
                     "gaps": done.gaps, "copies": done.copies, "base_ns": done.base_ns})
        return
    click.echo(f"{out}: {done.rows:,} events, {done.flows:,} arrows, {done.gaps:,} gaps, "
               f"{done.copies:,} copies (open in ui.perfetto.dev or chrome://tracing)",
               err=True)
