"""What the commands print: terminal tables fitted to the width, words, and JSON.

Every function here takes what :mod:`neurontrace.analyses` returned and gives text (or
writes JSON): none reads events or computes a figure. Tables use colour (a bold header)
only when stdout is a terminal (``click.echo`` drops the escapes otherwise). JSON goes
through orjson: integers stay exact, one document per command, keys as the library's
column names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.compare import OP_PREFIX
from neurontrace.analyses.gaps import CAUSES, Gaps
from neurontrace.analyses.report import Report
from neurontrace.diagnostics import Diagnostics
from neurontrace.views.names import short
from neurontrace.views.tables import (  # noqa: F401 - the commands take them from here
    Col,
    Format,
    count,
    duration,
    echo,
    emit_csv,
    emit_json,
    heading,
    nbytes,
    percent,
    ratio,
    records,
    show,
    table_text,
    top_rows,
)

if TYPE_CHECKING:  # the capture summary's figures (computed there, laid out here)
    from neurontrace.capture.report import Summary


def warnings(diag: Diagnostics, verbose: int) -> None:
    """The readers' notes (what was merged: :func:`after_output`), then their warnings
    on stderr under ``-v``; otherwise one line counting them."""
    for note in diag.notes:
        after_output(f"neurontrace: {note}")
    total = sum(diag.counts.values())
    if not total:
        return
    if not verbose:
        click.echo(f"neurontrace: {total:,} warning(s) while reading (see -v)", err=True)
        return
    for line in diag.lines():
        click.echo(f"  warning: {line}", err=True)


# -- the commands' output ---------------------------------------------------------------
# Each takes what the analyses returned and gives the lines to print; none computes.

OPS = (
    Col("name", "op", flex=True, right=False),
    Col("calls", "calls", count),
    Col("self_ns", "self", duration),
    Col("total_ns", "total", duration),
    Col("share", "share", percent),
)


def ops(table: pl.DataFrame, top: int, path: str, layer: str) -> list[str]:
    """``neurontrace ops``: the first ``top`` rows of :func:`neurontrace.analyses.ops`'s
    table (all for 0), and how many more there are."""
    if table.height == 0:
        return [f"{path}: no {'device work' if layer == 'device' else 'host ops'} found"]
    return top_rows(table, OPS, top)


#: The idle columns of a device and of a track.
_IDLE = (
    Col("span_ns", "span", duration),
    Col("busy_ns", "busy", duration),
    Col("idle_ns", "idle", duration),
    Col("idle_share", "idle%", percent),
    Col("gaps", "gaps", count),
    Col("causes", "idle by cause", flex=True, right=False, tail=False),
)
DEVICES = (
    Col("device_name", "device", flex=True, right=False),
    Col("tracks", "streams", count),
    *_IDLE,
)
TRACKS = (Col("track", "track", flex=True, right=False), *_IDLE)
GAPS = (
    Col("device_name", "device", flex=True, right=False),
    Col("at", "at", duration),
    Col(S.DUR_NS, "gap", duration),
    Col("cause", "cause", right=False),
    Col("before", "before", flex=True, right=False),
    Col("after", "after", flex=True, right=False),
)


def gaps_json(found: Gaps) -> dict[str, Any]:
    return {"devices": records(found.devices), "tracks": records(found.tracks),
            "device_gaps": records(found.device_gaps), "gaps": records(found.gaps)}


def device_names(devices: pl.DataFrame) -> pl.Expr:
    """``GPU 0`` (its tracks' common name), ``rank 1 / GPU 0`` when there are several
    ranks, from the ``rank`` and ``label`` columns of a per-device frame."""
    several = devices.get_column(S.RANK).n_unique() > 1 if devices.height else False
    label = pl.col("label").fill_null(pl.lit("device ") + pl.col(S.DEVICE_COL).cast(pl.String))
    if several:
        return (pl.lit("rank ") + pl.col(S.RANK).cast(pl.String) + pl.lit(" / ")
                + label).alias("device_name")
    return label.alias("device_name")


def _with_causes(table: pl.DataFrame) -> pl.DataFrame:
    return table.with_columns(
        idle_share=pl.when(pl.col("span_ns") > 0)
        .then(pl.col("idle_ns") / pl.col("span_ns")),
        causes=pl.Series([causes(row) for row in table.iter_rows(named=True)],
                         dtype=pl.String),
    )


def gaps(found: Gaps, top: int, path: str, sort: str | None = None) -> list[str]:
    """``neurontrace gaps``: the per-device table of :func:`neurontrace.analyses.gaps`
    (each device busy while any of its streams is), the per-stream table as a detail,
    then the ``top`` longest device gaps (all for 0), or with ``sort`` (``--sort``) the
    first ``top`` in their order (already sorted by that column)."""
    if found.devices.height == 0:
        return [f"{path}: no device work found (a CPU-only trace has no device gaps)"]
    name = device_names(found.devices)
    out = [heading("Idle per device (busy = the union of its streams or queues)"),
           table_text(_with_causes(found.devices.with_columns(name)), DEVICES)]
    if found.tracks.height > found.devices.height:
        out += ["", heading("Idle per stream (a detail: one stream's silence is not the "
                            "device's)"),
                table_text(_with_causes(found.tracks), TRACKS)]
    if found.device_gaps.height:
        first = found.devices.get_column(S.START_NS).min()
        longest = found.device_gaps if sort else found.device_gaps.sort(S.DUR_NS,
                                                                         descending=True)
        longest = (longest.head(top) if top else longest).with_columns(
            name, at=pl.col(S.START_NS) - first
        )
        out.append("")
        out.append(heading(f"{f'Device gaps by {sort}' if sort else 'Longest device gaps'} "
                           f"({longest.height:,} of "
                           f"{found.device_gaps.height:,}; no stream of the device busy; "
                           "'at' from the first device work)"))
        out.append(table_text(longest, GAPS))
    return out


def causes(track: dict[str, object]) -> str:
    """``host dispatch 88%, launch latency 12%``: a track's idle time by cause."""
    idle = track["idle_ns"]
    assert isinstance(idle, int)
    parts = []
    for c in sorted(CAUSES, key=lambda c: -int(track[f"{c}_ns"])):  # type: ignore[call-overload]
        ns = int(track[f"{c}_ns"])  # type: ignore[call-overload]
        if ns > 0 and idle > 0:
            parts.append(f"{c.replace('_', ' ')} {percent(ns / idle)}")
    return ", ".join(parts) or "-"


TRANSFERS = (
    Col("at", "at", duration),
    Col(S.DUR_NS, "dur", duration),
    Col("bytes", "bytes", nbytes),
    Col("direction", "dir", right=False),
    Col("tiny", "tiny", detail=True),
    Col("op", "op", flex=True, right=False),
    Col("via", "via", flex=True, right=False),
    Col("layers", "layers", flex=True, right=False, tail=False),
)
COPY_SUMMARY = (
    Col("op", "op", flex=True, right=False),
    Col("direction", "dir", right=False),
    Col("copies", "copies", count),
    Col("bytes", "bytes", nbytes),
    Col(S.DUR_NS, "time", duration),
    Col("tiny", "tiny h2d", count),
)


COPY_DIRECTIONS = (
    Col("direction", "dir", right=False),
    Col("copies", "copies", count),
    Col("bytes", "bytes", nbytes),
    Col("unsized", "size unknown", count),
    Col(S.DUR_NS, "time", duration),
    Col("tiny", "tiny h2d", count),
)

#: What each direction moves, for the headings.
DIRECTION_WORDS = {
    S.H2D: "host to device", S.D2H: "device to host", S.D2D: "device to device",
    S.P2P: "peer to peer (between devices)",
}


def copies(shown: pl.DataFrame, found: pl.DataFrame, summary: pl.DataFrame,
           directions: pl.DataFrame, path: str, sort: str | None = None) -> list[str]:
    """``neurontrace copies``: the transfers per direction (``directions``,
    :func:`neurontrace.analyses.copies.by_direction`), :func:`neurontrace.analyses.
    copy_summary`'s table (``summary``), then ``shown``: all of
    :func:`neurontrace.analyses.copies`'s transfers (``found``), in time order, or the
    largest of them (:func:`neurontrace.analyses.copies.largest`), largest first. Host
    and device, device and device, and peer copies are kept apart; the host-scalar hint
    is given for tiny host-to-device copies only. With ``sort`` (``--sort``), ``shown`` is
    the first rows of ``found`` in that column's order, and the heading says so."""
    if found.height == 0:
        return [f"{path}: no transfers found (host to device, device to host, device to "
                "device or peer to peer)"]
    which = (f"{'all' if shown.height == found.height else 'first'} "
             f"{shown.height:,} of {found.height:,} by {sort}" if sort
             else f"all {found.height:,}, in time order" if shown.height == found.height
             else f"largest {shown.height:,} of {found.height:,} by bytes, then time")
    shown = shown.with_columns(at=pl.col(S.START_NS) - found.get_column(S.START_NS).min())
    said = [DIRECTION_WORDS.get(d, "direction not recorded") + f" {n:,}"
            for d, n in directions.select("direction", "copies").iter_rows()]
    lines = [
        heading(f"Transfers by direction ({found.height:,}: {', '.join(said)})"),
        table_text(directions, COPY_DIRECTIONS),
    ]
    tiny = directions.filter(pl.col("direction") == S.H2D).get_column("tiny").sum()
    if tiny:
        lines.append(f"{tiny:,} tiny host-to-device copies (<= 64 B): scalars living on "
                     "the host, copied before each use?")
    return [
        *lines,
        "",
        heading("Per op and direction"),
        table_text(summary, COPY_SUMMARY),
        "",
        heading(f"Transfers ({which}; 'at' from the first)"),
        table_text(shown, TRANSFERS),
    ]


STEPS = (
    Col("step", "step", count),
    Col("wall_ns", "wall", duration),
    Col("busy_ns", "busy", duration),
    Col("idle_ns", "idle", duration),
    *(Col(f"{c}_ns", c.replace("_", " "), duration, detail=True) for c in CAUSES),
    Col("host_only_ns", "host only", duration),
    Col("launches", "launches", count),
)


def steps(table: pl.DataFrame, path: str) -> list[str]:
    """``neurontrace steps``: :func:`neurontrace.analyses.steps`'s table, with a rank
    column only when there are several ranks."""
    if table.height == 0:
        return [f"{path}: no ProfilerStep#N spans (profile with a schedule and call "
                "prof.step())"]
    ranks = table.get_column("rank").unique()
    cols = STEPS if ranks.len() == 1 else (Col("rank", "rank", count), *STEPS)
    return [table_text(table, cols)]


def compare(table: pl.DataFrame, names: Sequence[str]) -> list[str]:
    """``neurontrace compare``: :func:`neurontrace.analyses.compare`'s long table as one
    row per metric, a value column per run (``names``, in order) and the ratio to the
    first. The headline ``step_ns`` is the median step time; a run without steps shows
    its whole-trace wall time there, labelled, and a note says so. Without device rows
    (no run has device work) a note says once that the runs are host only."""
    wide = table.pivot("run", index="metric", values=["value", "ratio"], sort_columns=False)
    value = {(m, r): v for m, r, v in table.select("metric", "run", "value").iter_rows()}
    cols = [Col("metric", "", _metric_label, flex=True, right=False)]
    for i, n in enumerate(names):
        cols.append(Col(f"value_{n}", n, _metric_cell(value.get(("wall_ns", n)))))
        if i:
            cols.append(Col(f"ratio_{n}", "x first", ratio))
    shown = wide.with_columns(
        pl.struct("metric", pl.col(f"value_{n}")).alias(f"value_{n}") for n in names
    )
    lines = [table_text(shown, cols)]
    stepless = [n for n in names if ("step_ns", n) in value and value["step_ns", n] is None]
    if stepless:
        lines.append(f"no ProfilerStep#N spans in {', '.join(stepless)}: step time falls "
                     "back to the whole-trace wall time (no ratio to a median step)")
    if ("device_ns", names[0]) not in value:
        lines.append("host only: no run has device work (device rows left out; op rows are "
                     "self time on the host)")
    return lines


_METRIC_LABELS = {"step_ns": "step_ns (median step)", "wall_ns": "wall_ns (whole trace)"}


def _metric_label(metric: Any) -> str:
    return _METRIC_LABELS.get(metric, metric)


def _metric_cell(wall_ns: Any) -> Format:
    """A run's value cells; its null ``step_ns`` (no steps) reads as its wall time."""
    def cell(v: dict[str, object]) -> str:
        if v["metric"] == "step_ns" and next(x for k, x in v.items() if k != "metric") is None:
            return f"wall {duration(wall_ns)} (no steps)"
        return _metric_value(v)
    return cell


def _metric_value(v: dict[str, object]) -> str:
    metric, value = v["metric"], next(x for k, x in v.items() if k != "metric")
    assert isinstance(metric, str)
    if metric.endswith("_ns") or metric.startswith(OP_PREFIX):
        return duration(value)
    if metric.endswith("_bytes"):
        return nbytes(value)
    return count(value)


# -- report -------------------------------------------------------------------------------

def report_json(r: Report) -> dict[str, Any]:
    return {
        "steps": r.steps,
        "transfers": r.transfers,
        "host_ops": records(r.host_ops),
        "device_ops": records(r.device_ops),
        "devices": records(r.devices),
        "tracks": records(r.tracks),
        "idle": records(r.idle),
        "largest_gaps": records(r.largest_gaps),
        "copies": records(r.copies),
        "directions": records(r.directions),
        "device_rows": records(r.device_rows),
        "runtime_calls": r.runtime_calls,
    }


_PLURAL = {"launch": "launches", "call": "calls", "copy": "copies"}


def _per_step(n: int, steps: int, noun: str, adjective: str = "") -> str:
    """``3 launches per step`` (or ``7 launches`` without steps); ``1 h2d copy per step``."""
    v = n / steps if steps else float(n)
    number = f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"
    word = noun if v == 1 else _PLURAL[noun]
    return f"{number} {adjective + ' ' if adjective else ''}{word}" + (" per step" if steps else "")


#: How a device row category that is not device work is named, per row.
_DEVICE_ROW_NAMES = {
    "cuda_profiler_range": "CUPTI profiler range(s) (counters measured over a range)",
    "gpu_user_annotation": "GPU annotation range(s)",
    "cuda_sync": "device synchronization row(s)",
}


def no_device_work(r: Report) -> list[str]:
    """Why a report has no device time: no device rows at all (host only), or device rows
    that are not device work, said by what they are, and the runtime calls whose work the
    trace lacks (the terminal and the HTML page say the same)."""
    if not r.device_rows.height:
        return ["No device work in this trace (host only)."]
    parts = [f"{n:,} " + (_DEVICE_ROW_NAMES.get(cat or "")
                          or f"{cat or 'uncategorised'} row(s) (role {role})")
             for role, cat, n in r.device_rows.iter_rows()]
    out = ["No device work in this trace: its device rows are " + ", ".join(parts)
           + ", not kernels or copies."]
    if r.runtime_calls:
        out.append(f"  {r.runtime_calls:,} runtime call(s) on the host; the device side of "
                   "their launches and copies is not in the trace.")
    return out


def report(r: Report, name: str) -> list[str]:
    """``neurontrace report``: a :class:`neurontrace.analyses.Report` in plain words."""
    out = [heading(name)
           + (f"  ({r.steps:,} steps)" if r.steps else "  (no ProfilerStep spans)")]
    out.append("")
    if r.device_ops.height:
        out.append(heading("Device time by the op that launched it"))
        out.extend(_op_lines(r.device_ops, "device time", r.steps, "launch"))
    else:
        out.extend(no_device_work(r))
    out.append("")
    if r.devices.height:
        span = int(r.devices.get_column("span_ns").sum())
        idle = int(r.devices.get_column("idle_ns").sum())
        share = idle / span if span else 0.0
        n, streams = r.devices.height, int(r.devices.get_column("tracks").sum())
        out.append(heading("Device idle time (per device: no stream or queue of it busy)"))
        out.append(f"  {duration(idle)} idle of {duration(span)} "
                   f"({percent(share)}) over {n:,} device(s)"
                   + (f" ({streams:,} streams or queues)" if streams > n else ""))
        by_cause = [f"{c.replace('_', ' ')} {duration(ns)} ({percent(ns / idle)})"
                    for c, ns in r.idle.iter_rows()] if idle else []
        if by_cause:
            out.append("  by cause: " + ", ".join(by_cause))
        if r.largest_gaps.height:
            first = r.largest_gaps.head(1)
            where = first.select(device_names(r.devices)).item()
            dur, cause, before, after = first.select(S.DUR_NS, "cause", "before",
                                                     "after").row(0)
            out.append(f"  longest gap of a device: {duration(dur)} on {where}, "
                       f"{cause.replace('_', ' ')}, after {short(before)}, "
                       f"before {short(after)}")
        out.append("")
    if r.transfers:
        said = [DIRECTION_WORDS.get(d, "direction not recorded") + f" {n:,}"
                for d, n in r.directions.select("direction", "copies").iter_rows()]
        out.append(heading(f"Copies: {r.transfers:,} transfer(s) ({', '.join(said)})"))
        for op, direction, n, size, _dur, tiny in r.copies.iter_rows():
            small = (", all tiny (<= 64 B: scalars living on the host?)" if tiny == n
                     else f", {tiny:,} tiny" if tiny else "")
            out.append(f"  {short(op)}: {_per_step(n, r.steps, 'copy', direction or '')}, "
                       f"{nbytes(size)}{small}")
    else:
        out.append("No copies (host to device, device to host or between devices).")
    out.append("")
    if r.host_ops.height:
        out.append(heading("Host time by op (self CPU, as key_averages)"))
        out.extend(_op_lines(r.host_ops, "host self time", r.steps, "call"))
    return out


def _op_lines(table: pl.DataFrame, of: str, steps: int, unit: str) -> list[str]:
    """"aten::mul: 85.2% of device time, 3 launches per step" per row of an op table."""
    return [f"  {short(name)}: {percent(share)} of {of}, " + _per_step(calls, steps, unit)
            for name, calls, _self, _total, share in table.iter_rows()]


# -- capture ------------------------------------------------------------------------------

def capture_summary(summaries: Sequence[Summary], label: str = "variant") -> list[str]:
    """The lines ``neurontrace capture`` ends with: a small fixed-width table, one variant
    (or rank) a line (the figures of :func:`neurontrace.capture.report.summarise`)."""
    name_width = max([len(label), *(len(s.name) for s in summaries)])
    basis = sorted({s.basis for s in summaries if s.basis}) or ["self CPU time"]
    lines = [f"{label:<{name_width}}  {'events':>7}  {'step (median)':>13}  "
             f"top ops by {' / '.join(basis)}"]
    for s in summaries:
        if s.skipped is not None:
            lines.append(f"{s.name:<{name_width}}  SKIPPED: {s.skipped}")
            continue
        top = ", ".join(f"{op} {percent(share)}" for op, share in s.top) or "-"
        step = f"{s.step_ns / 1e6:.3f} ms" if s.step_ns is not None else "-"
        lines.append(f"{s.name:<{name_width}}  {s.events:>7,}  {step:>13}  {top}")
    return lines


# -- kernels ------------------------------------------------------------------------------

KERNELS = (
    Col("name", "device work", flex=True, right=False),
    Col("calls", "calls", count),
    Col("total_ns", "total", duration),
    Col("mean_ns", "mean", duration),
    Col("min_ns", "min", duration),
    Col("max_ns", "max", duration),
    Col("share", "share", percent),
)


def kernels(table: pl.DataFrame, top: int, path: str) -> list[str]:
    """``neurontrace kernels``: the first ``top`` rows of
    :func:`neurontrace.analyses.kernels` (all for 0), and how many more there are."""
    if table.height == 0:
        return [f"{path}: no device work found"]
    return top_rows(table, KERNELS, top)


def after_output(line: str) -> None:
    """``line`` on the stderr descriptor, which the command line holds while a command
    runs (:class:`neurontrace.cli.main.HeldStderr`): shown after the command's output
    when it succeeds, dropped when it fails (a failure is one line); at once elsewhere."""
    sys.stderr.flush()
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:  # no descriptor 2
        click.echo(line, err=True)
