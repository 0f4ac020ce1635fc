"""``neurontrace report``: the three answers in plain words, on one screen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from neurontrace import analysis
from neurontrace.analysis.report import Report
from neurontrace.cli import render as R
from neurontrace.cli.options import json_option, path_argument, top_option, verbose_option


@click.command()
@path_argument
@top_option(5)
@json_option
@verbose_option
def report(path: Path, top: int, as_json: bool) -> None:
    """Op share, device idle time and copies in PATH, in plain words.

    e.g. "aten::mul: 49.5% of device time, 3 launches per step". --json prints the
    tables behind the words.
    """
    r = analysis.report(analysis.events(path), top=top or 1_000_000)
    if as_json:
        R.emit_json(as_dict(r))
        return
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
        for name_, calls, _self, _total, share in r.device_ops.iter_rows():
            out.append(f"  {name_}: {R.percent(share)} of device time, "
                       + _per_step(calls, r.steps, "launch"))
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
                       f"{cause.replace('_', ' ')}, after {before}, before {after}")
        out.append("")
    if r.transfers:
        out.append(R.heading(f"Copies: {r.transfers:,} transfer(s) between host and device"))
        for op, direction, n, nbytes, _dur, tiny in r.copies.iter_rows():
            small = (", all tiny (<= 64 B: scalars living on the host?)" if tiny == n
                     else f", {tiny:,} tiny" if tiny else "")
            out.append(f"  {op}: {_per_step(n, r.steps, 'copy', direction or '')}, "
                       f"{R.nbytes(nbytes)}{small}")
    else:
        out.append("No copies between host and device.")
    out.append("")
    if r.host_ops.height:
        out.append(R.heading("Host time by op (self CPU, as key_averages)"))
        for name_, calls, _self, _total, share in r.host_ops.iter_rows():
            out.append(f"  {name_}: {R.percent(share)} of host self time, "
                       + _per_step(calls, r.steps, "call"))
    return out
