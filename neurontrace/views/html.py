"""One self-contained HTML report: findings, timeline, op share, idle time by cause,
copies, and for several runs the comparison and the findings that changed between them.

Everything is inline: the page is :data:`TEMPLATE` (hand-written CSS and canvas/DOM
JavaScript, no library, nothing fetched) with the figures embedded as JSON. The
figures are the analyses' results, computed by the caller (:class:`.results.Run`): this
module only cuts and embeds them.

The timeline embeds at most ``max_events`` events per run: those starting at or after
the first ``ProfilerStep`` (or the trace's start), in time order. The page says how many
it shows of how many, and over which time window.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.gaps import CAUSES
from neurontrace.io import atomic
from neurontrace.views.findings import at_stake, change_stake
from neurontrace.views.results import Run, cut
from neurontrace.views.terminal import no_device_work

MAX_EVENTS = 20_000
MAX_DEPTH = 5  # nesting levels drawn per lane; deeper spans are drawn at this level
_PLACEHOLDER = "/*__NEURONTRACE_DATA__*/null"


def template() -> str:
    return resources.files("neurontrace.views").joinpath("report.html").read_text("utf-8")


def page_data(runs: Sequence[Run], comparison: pl.DataFrame | None = None, top: int = 10,
              max_events: int = MAX_EVENTS,
              changes: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the page shows, as plain JSON-able values: per run, its report's tables
    and its findings (each with ``at_stake_text``, its time at stake as the terminal
    words it, and ``findings_total``) cut to ``top`` rows, and its timeline;
    ``comparison``: the table of :func:`neurontrace.analyses.compare` (shown with several
    runs); ``changes``: the findings of each run against the first's
    (:func:`neurontrace.analyses.advice.diff.against_first`'s rows, every one, each with
    ``at_stake_text``: ``was 47.2 µs a step`` for one that disappeared, else its time at
    stake in the later run; shown with several runs)."""
    data: dict[str, Any] = {
        "runs": [_run(run, top, max_events) for run in runs],
        "causes": list(CAUSES),
        "layers": list(S.LAYERS),
    }
    if len(runs) > 1 and comparison is not None:
        data["compare"] = comparison.to_dicts()
    if len(runs) > 1 and changes is not None:
        data["changes"] = [{**row, "at_stake_text": change_stake(row)} for row in changes]
    return data


def write(runs: Sequence[Run], out: str | os.PathLike[str],
          comparison: pl.DataFrame | None = None, top: int = 10,
          max_events: int = MAX_EVENTS,
          changes: Sequence[Mapping[str, Any]] | None = None) -> Path:
    """Write the page to ``out`` (through a temporary file renamed into place)."""
    blob = orjson.dumps(page_data(runs, comparison, top, max_events, changes)).decode()
    # Inside <script>, "</" could close the element: JSON allows "<\/" for it.
    html = template().replace(_PLACEHOLDER, blob.replace("</", "<\\/"))
    dst = Path(out)
    with atomic.writing(dst) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return dst


def _run(run: Run, top: int, max_events: int) -> dict[str, Any]:
    r = cut(run.report, top)
    # Per device, each the union of its streams (as the report's headline says).
    span = int(r.devices.get_column("span_ns").sum()) if r.devices.height else 0
    idle = int(r.devices.get_column("idle_ns").sum()) if r.devices.height else 0
    return {
        "name": run.name,
        "findings": [{**f, "at_stake_text": at_stake(f)} for f in run.findings[:top or None]],
        "findings_total": len(run.findings),
        "steps": r.steps,
        "transfers": r.transfers,
        "host_ops": r.host_ops.to_dicts(),
        "device_ops": r.device_ops.to_dicts(),
        # what the trace has and lacks when it has no device work, as the terminal says
        "no_device_work": None if r.device_ops.height
        else " ".join(line.strip() for line in no_device_work(r)),
        "idle": r.idle.to_dicts(),
        "span_ns": span,
        "idle_ns": idle,
        "largest_gaps": r.largest_gaps.to_dicts(),
        "copies": r.copies.to_dicts(),
        "timeline": timeline(run.events, on_tracks(run.report.largest_gaps,
                                                   run.report.tracks), max_events),
    }


def on_tracks(device_gaps: pl.DataFrame, tracks: pl.DataFrame) -> pl.DataFrame:
    """Device gaps (``rank, device, start_ns, dur_ns, cause``) drawn on every stream of
    their device: one row per gap and track (``rank, track, start_ns, dur_ns, cause``)."""
    return device_gaps.join(tracks.select(S.RANK, S.DEVICE_COL, S.TRACK),
                            on=[S.RANK, S.DEVICE_COL], nulls_equal=True).select(
        S.RANK, S.TRACK, S.START_NS, S.DUR_NS, "cause")


def timeline(lf: pl.LazyFrame, gaps: pl.DataFrame, max_events: int = MAX_EVENTS
             ) -> dict[str, Any]:
    """The capped event list the page draws: lanes, names, and rows of
    ``[lane, start_ns from t0, dur_ns, name index, layer index, depth]``, plus the gaps
    (``gaps``: rows of :func:`neurontrace.analyses.gaps`'s ``gaps``, any order) in the
    window as ``[lane, start, dur, cause index]``, by track and time."""
    ev = lf.select(S.RANK, S.TRACK, S.LAYER, S.NAME, S.KIND, S.START_NS, S.DUR_NS,
                   S.DEPTH).collect()
    total = ev.height
    steps = ev.filter(pl.col(S.NAME).str.contains(S.STEP_PATTERN)
                      & (pl.col(S.LAYER) == S.FRAMEWORK))
    t0 = int((steps if steps.height else ev).get_column(S.START_NS).min() or 0)  # type: ignore[arg-type]
    after = ev.filter(pl.col(S.START_NS) >= t0)
    shown = after.sort(S.START_NS, maintain_order=True).head(max_events)
    t1 = int(shown.select((pl.col(S.START_NS) + pl.col(S.DUR_NS)).max()).item() or t0)
    lanes = (shown.group_by(S.RANK, S.TRACK, maintain_order=True)
             .agg(pl.col(S.LAYER).mode().first(), pl.col(S.DEPTH).max().alias("_d"))
             .sort(S.RANK, pl.col(S.LAYER).replace_strict(
                 {v: i for i, v in enumerate(S.LAYERS)}, default=0), S.TRACK)
             .with_row_index("_lane"))
    names = shown.get_column(S.NAME).unique(maintain_order=True)
    name_idx = pl.DataFrame({S.NAME: names}).with_row_index("_name")
    rows = (shown.join(lanes.select(S.RANK, S.TRACK, "_lane"), on=[S.RANK, S.TRACK])
            .join(name_idx, on=S.NAME)
            .select("_lane", pl.col(S.START_NS) - t0, S.DUR_NS, "_name",
                    pl.col(S.LAYER).replace_strict({v: i for i, v in enumerate(S.LAYERS)},
                                                   default=0, return_dtype=pl.Int64),
                    pl.col(S.DEPTH).fill_null(0).clip(0, MAX_DEPTH)))
    g = (gaps.sort(S.RANK, S.TRACK, S.START_NS)
         .filter((pl.col(S.START_NS) >= t0) & (pl.col(S.START_NS) <= t1)))
    gap_rows = (g.join(lanes.select(S.RANK, S.TRACK, "_lane"), on=[S.RANK, S.TRACK])
                .select("_lane", pl.col(S.START_NS) - t0, S.DUR_NS,
                        pl.col("cause").replace_strict({c: i for i, c in enumerate(CAUSES)},
                                                       return_dtype=pl.Int64)))
    return {
        "t0_ns": t0,
        "window_ns": t1 - t0,
        "shown": shown.height,
        "total": total,
        "from_step": bool(steps.height),
        "capped": after.height > shown.height,
        "lanes": [{"name": f"{track}" if rank == 0 else f"rank {rank} · {track}",
                   "layer": layer, "depth": min(int(d or 0), MAX_DEPTH)}
                  for _i, rank, track, layer, d in lanes.iter_rows()],
        "names": names.to_list(),
        "events": rows.rows(),
        "gaps": gap_rows.rows(),
    }
