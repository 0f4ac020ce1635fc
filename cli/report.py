"""``neurontrace report``: the three answers in plain words, on one screen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import polars as pl

from neurontrace import analysis, atomic
from neurontrace.analysis.report import Report
from neurontrace.cli import render as R
from neurontrace.cli.compare import labels
from neurontrace.cli.options import json_option, top_option, verbose_option
from neurontrace.diagnostics import Diagnostics
from neurontrace.views import html


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@top_option(5)
@click.option("--html", "html_out", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Also write one self-contained HTML page (timeline, op "
              "share, idle time by cause, copies; with several PATHS, their comparison).")
@click.option("--max-events", type=click.IntRange(min=1), default=html.MAX_EVENTS,
              show_default=True, help="Timeline events the HTML page embeds per run.")
@json_option
@verbose_option
@click.pass_context
def report(ctx: click.Context, paths: tuple[Path, ...], top: int, html_out: Path | None,
           max_events: int, as_json: bool) -> None:
    """Op share, device idle time and copies in PATHS, in plain words.

    e.g. "aten::mul: 49.5% of device time, 3 launches per step". --json prints the
    tables behind the words (a list with several PATHS). --html OUT.html writes the
    same as a page that needs no network.
    """
    if html_out is not None:  # before anything is read: never over an input
        atomic.refuse_overlap(paths, html_out)
        atomic.check_output(html_out)
    diag = Diagnostics()
    runs = {label: analysis.events(p, diag=diag)
            for label, p in zip(labels(paths), paths, strict=True)}
    R.warnings(diag, (ctx.obj or {}).get("verbose", 0))
    reports = [analysis.report(lf, top=top or 1_000_000) for lf in runs.values()]
    if html_out is not None:
        html.write(runs, html_out, top=max(top, 10) if top else 1_000_000,
                   max_events=max_events)
        click.echo(f"{html_out}: report of {len(runs)} run(s)", err=True)
    if as_json:
        docs = [as_dict(r) for r in reports]
        R.emit_json(docs[0] if len(docs) == 1 else docs)
        return
    for i, (path, r) in enumerate(zip(paths, reports, strict=True)):
        if i:
            R.echo()
        for line in words(r, str(path)):
            R.echo(line)


def as_dict(r: Report) -> dict[str, Any]:
    return {
        "steps": r.steps,
        "transfers": r.transfers,
        "host_ops": R.records(r.host_ops),
        "device_ops": R.records(r.device_ops),
        "tracks": R.records(r.tracks),
        "idle": R.records(r.idle),
        "largest_gaps": R.records(r.largest_gaps),
        "copies": R.records(r.copies),
    }


_PLURAL = {"launch": "launches", "call": "calls", "copy": "copies"}


def _per_step(n: int, steps: int, noun: str, adjective: str = "") -> str:
    """``3 launches per step`` (or ``7 launches`` without steps); ``1 h2d copy per step``."""
    v = n / steps if steps else float(n)
    number = f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"
    word = noun if v == 1 else _PLURAL[noun]
    return f"{number} {adjective + ' ' if adjective else ''}{word}" + (" per step" if steps else "")


def words(r: Report, name: str) -> list[str]:
    out = [R.heading(name)
           + (f"  ({r.steps:,} steps)" if r.steps else "  (no ProfilerStep spans)")]
    out.append("")
    if r.device_ops.height:
        out.append(R.heading("Device time by the op that launched it"))
        out.extend(_op_lines(r.device_ops, "device time", r.steps, "launch"))
    else:
        out.append("No device work in this trace (host only).")
    out.append("")
    if r.tracks.height:
        span = int(r.tracks.get_column("span_ns").sum())
        idle = int(r.tracks.get_column("idle_ns").sum())
        share = idle / span if span else 0.0
        out.append(R.heading("Device idle time"))
        out.append(f"  {R.duration(idle)} idle of {R.duration(span)} "
                   f"({R.percent(share)}) over {r.tracks.height:,} device track(s)")
        causes = [f"{c.replace('_', ' ')} {R.duration(ns)} ({R.percent(ns / idle)})"
                  for c, ns in r.idle.iter_rows()] if idle else []
        if causes:
            out.append("  by cause: " + ", ".join(causes))
        if r.largest_gaps.height:
            _rank, track, _start, dur, cause, before, after = r.largest_gaps.row(0)
            out.append(f"  longest gap: {R.duration(dur)} on {track}, "
                       f"{cause.replace('_', ' ')}, after {R.short(before)}, "
                       f"before {R.short(after)}")
        out.append("")
    if r.transfers:
        out.append(R.heading(f"Copies: {r.transfers:,} transfer(s) between host and device"))
        for op, direction, n, nbytes, _dur, tiny in r.copies.iter_rows():
            small = (", all tiny (<= 64 B: scalars living on the host?)" if tiny == n
                     else f", {tiny:,} tiny" if tiny else "")
            out.append(f"  {R.short(op)}: {_per_step(n, r.steps, 'copy', direction or '')}, "
                       f"{R.nbytes(nbytes)}{small}")
    else:
        out.append("No copies between host and device.")
    out.append("")
    if r.host_ops.height:
        out.append(R.heading("Host time by op (self CPU, as key_averages)"))
        out.extend(_op_lines(r.host_ops, "host self time", r.steps, "call"))
    return out


def _op_lines(table: pl.DataFrame, of: str, steps: int, unit: str) -> list[str]:
    """"aten::mul: 49.5% of device time, 3 launches per step" per row of an op table."""
    return [f"  {R.short(name)}: {R.percent(share)} of {of}, " + _per_step(calls, steps, unit)
            for name, calls, _self, _total, share in table.iter_rows()]
