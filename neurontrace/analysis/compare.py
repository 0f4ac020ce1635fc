"""Runs side by side: did the change help?

Each run is reduced to the same figures (:data:`METRICS`), and each figure is divided by
the first run's (``ratio``; below 1 means less time or fewer events than the first):

- ``wall_ns``: from the first event's start to the last event's end;
- ``steps``: ``ProfilerStep#N`` spans;
- ``host_ns``: the sum of self times of the host view (``key_averages()``'s "Self CPU
  time total");
- ``device_ns``: device time of all launches; ``device_busy_ns``: the union of device
  work, summed over tracks; ``idle_ns``: device idle time summed over tracks;
- ``launches``: device launches;
- ``copies``, ``copy_bytes``, ``tiny_copies``: transfers between host and device;
- ``op:<name>``: for each op among the top ``top`` of any run, its device time (or,
  when no run has device work, its self time on the host).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from neurontrace import schema as S
from neurontrace.analysis import vocab as V
from neurontrace.analysis.copies import copies
from neurontrace.analysis.gaps import gaps
from neurontrace.analysis.ops import NAME as OP_NAME
from neurontrace.analysis.ops import SELF_NS as OP_SELF_NS
from neurontrace.analysis.ops import device_ops, host_ops

METRICS = (
    "wall_ns", "steps", "host_ns", "device_ns", "device_busy_ns", "idle_ns", "launches",
    "copies", "copy_bytes", "tiny_copies",
)
OP_PREFIX = "op:"
COLUMNS = ("metric", "run", "value", "ratio")


def compare(runs: Mapping[str, pl.LazyFrame], top: int = 5) -> pl.DataFrame:
    """Long form: ``metric, run, value, ratio`` (ratio to the first run), runs in order."""
    if not runs:
        raise ValueError("compare needs at least one run")
    figures: dict[str, dict[str, int]] = {}
    op_tables: dict[str, pl.DataFrame] = {}
    host_tables: dict[str, pl.DataFrame] = {}
    for label, lf in runs.items():
        figures[label], op_tables[label], host_tables[label] = _figures(lf)
    use_device = any(t.height for t in op_tables.values())
    tables = op_tables if use_device else host_tables
    names: list[str] = []
    for t in tables.values():
        for name in t.get_column(OP_NAME).head(top).to_list():
            if name not in names:
                names.append(name)
    for label, t in tables.items():
        value = dict(zip(t.get_column(OP_NAME).to_list(), t.get_column(OP_SELF_NS).to_list(),
                         strict=True))
        for name in names:
            figures[label][OP_PREFIX + name] = int(value.get(name, 0))
    rows = []
    first = next(iter(runs))
    for metric in (*METRICS, *(OP_PREFIX + n for n in names)):
        base = figures[first][metric]
        for label in runs:
            v = figures[label][metric]
            rows.append((metric, label, v, v / base if base else None))
    return pl.DataFrame(
        rows, schema={"metric": pl.String, "run": pl.String, "value": pl.Int64,
                      "ratio": pl.Float64}, orient="row",
    )


def _figures(lf: pl.LazyFrame) -> tuple[dict[str, int], pl.DataFrame, pl.DataFrame]:
    span = lf.filter(V.is_span()).select(
        first=pl.col(S.START_NS).min(),
        last=(pl.col(S.START_NS) + pl.col(S.DUR_NS)).max(),
        steps=pl.col(S.NAME).str.contains(V.PROFILER_STEP_PATTERN)
        .and_(pl.col(S.LAYER) == S.FRAMEWORK).sum(),
    ).collect()
    host = host_ops(lf)
    dev = device_ops(lf)
    idle = gaps(lf).tracks
    moved = copies(lf)
    first, last = span.get_column("first")[0], span.get_column("last")[0]
    f = {
        "wall_ns": int(last - first) if first is not None else 0,
        "steps": int(span.get_column("steps")[0] or 0),
        "host_ns": int(host.get_column(OP_SELF_NS).sum()),
        "device_ns": int(dev.get_column(OP_SELF_NS).sum()),
        "device_busy_ns": int(idle.get_column("busy_ns").sum()),
        "idle_ns": int(idle.get_column("idle_ns").sum()),
        "launches": int(dev.get_column("calls").sum()),
        "copies": moved.height,
        "copy_bytes": int(moved.get_column(S.BYTES).sum()),
        "tiny_copies": int(moved.get_column("tiny").sum()),
    }
    return f, dev, host.filter(pl.col("name") != V.PROFILER_STEP_ALL)
