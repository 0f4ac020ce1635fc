"""What ``neurontrace launches`` and ``neurontrace ranks`` print: the tables of
:mod:`neurontrace.analyses.launches` and :mod:`neurontrace.analyses.ranks`, laid out
with :mod:`.tables`' tables. Nothing here computes a figure."""

from __future__ import annotations

from typing import Any

import polars as pl

from neurontrace.views.tables import Col, count, duration, heading, percent, table_text, top_rows

_DELAYS = (
    Col("launches", "launches", count),
    Col("mean_delay_ns", "delay mean", duration, detail=True),
    Col("median_delay_ns", "median", duration, detail=True),
    Col("p95_delay_ns", "p95", duration),
    Col("max_delay_ns", "max", duration, detail=True),
    Col("short", "short", count),
    Col("outliers", "outliers", count),
)
KERNELS = (Col("key", "kernel", flex=True, right=False), *_DELAYS)
OPS = (Col("key", "op", flex=True, right=False), *_DELAYS)
OUTLIERS = (
    Col("name", "kernel", flex=True, right=False),
    Col("call", "call", flex=True, right=False),
    Col("call_ns", "call time", duration),
    Col("device_ns", "device", duration),
    Col("launch_delay_ns", "delay", duration),
)
ANNOTATIONS = (
    Col("name", "annotation", flex=True, right=False),
    Col("calls", "calls", count),
    Col("total_ns", "total", duration),
    Col("mean_ns", "mean", duration),
    Col("max_ns", "max", duration),
)
SLOWEST = (
    Col("step", "step", count),
    Col("ranks", "ranks", count),
    Col("slowest_rank", "slowest rank", count),
    Col("slowest_ns", "its step", duration),
    Col("fastest_ns", "fastest", duration),
    Col("spread_ns", "spread", duration),
)
RANKS = (
    Col("rank", "rank", count),
    Col("steps", "steps", count),
    Col("mean_ns", "mean step", duration),
    Col("median_ns", "median", duration),
    Col("max_ns", "max", duration),
    Col("slowest", "slowest in", count),
)
BREAKDOWN = (
    Col("rank", "rank", count),
    Col("span_ns", "span", duration),
    Col("compute_ns", "compute", duration),
    Col("communication_ns", "comm", duration),
    Col("memory_ns", "memory", duration),
    Col("idle_ns", "idle", duration),
    Col("collective_ns", "collective", duration),
    Col("overlap", "overlap", percent),
)


def launches(tables: dict[str, pl.DataFrame], top: int, path: str) -> list[str]:
    """``neurontrace launches``: ``tables`` holds ``kernels``, ``ops``, ``outliers``
    and ``annotations`` (the analyses' frames), each cut to ``top`` rows (0: all)."""
    out: list[str] = []
    if tables["kernels"].height == 0:
        out.append(f"{path}: no launches found (no runtime call shares a correlation "
                   "with device work)")
    else:
        out += [heading("launch delay per kernel"), *top_rows(tables["kernels"], KERNELS, top),
                "", heading("launch delay per op"), *top_rows(tables["ops"], OPS, top), ""]
        if tables["outliers"].height:
            out += [heading("outliers (call over 50 µs or delay over 100 µs)"),
                    *top_rows(tables["outliers"], OUTLIERS, top)]
        else:
            out.append("no outliers (call over 50 µs or delay over 100 µs)")
    if tables["annotations"].height:
        out += ["", heading("annotations on the device"),
                *top_rows(tables["annotations"], ANNOTATIONS, top)]
    return out


def ranks(tables: dict[str, pl.DataFrame], path: str) -> list[str]:
    """``neurontrace ranks``: ``tables`` holds ``slowest``, ``ranks`` and
    ``breakdown`` (the analyses' frames)."""
    out: list[str] = []
    if tables["ranks"].height:
        out += [heading("step time per rank"), table_text(tables["ranks"], RANKS), "",
                heading("slowest rank per step"), table_text(tables["slowest"], SLOWEST), ""]
    else:
        out += [f"{path}: no ProfilerStep#N spans (profile with a schedule and call "
                "prof.step())", ""]
    if tables["breakdown"].height:
        out += [heading("device time per rank (streams merged; comm = not hidden by "
                        "compute)"), table_text(tables["breakdown"], BREAKDOWN)]
    else:
        out.append(f"{path}: no device work")
    return out


def as_json(tables: dict[str, pl.DataFrame], top: int) -> dict[str, Any]:
    """Each table as a list of records, the first ``top`` rows (0: all)."""
    return {k: (t.head(top) if top else t).to_dicts() for k, t in tables.items()}
