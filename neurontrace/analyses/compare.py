"""Runs side by side: did the change help?

Each run is reduced to the same figures (:data:`METRICS`), and each figure is divided by
the first run's (``ratio``; below 1 means less time or fewer events than the first):

- ``step_ns``: the median step time, the headline (:func:`.steps.median_step_ns`: the
  median of the ``ProfilerStep#N`` spans' durations, so the first step's warm-up does
  not weigh on it); null (and its ratio null) for a run without steps, whose time is then
  only its ``wall_ns``;
- ``wall_ns``: whole-trace wall time, from the first span's start to the last span's end
  (warm-up and profiler start-up included): a detail;
- ``steps``: ``ProfilerStep#N`` spans;
- ``host_ns``: the sum of self times of the host view (``key_averages()``'s "Self CPU
  time total");
- ``device_ns``: device time of all launches; ``device_busy_ns``: the union of device
  work on each device (all its streams or queues), summed over devices; ``idle_ns``:
  each device's idle time (no stream of it busy), summed over devices;
- ``launches``: device launches;
- ``copies``, ``copy_bytes``, ``tiny_copies``: transfers, every direction (``tiny``: h2d only);
- ``op:<name>``: for each op among the top ``top`` of any run, its device time (or,
  when no run has device work, its self time on the host).

When no run has device work (no device op, no transfer), the device figures
(:data:`DEVICE_METRICS`, all zero) are left out: every run is host only.

Every figure but ``step_ns``, ``wall_ns`` and ``steps`` is read from the run's
:class:`.report.Report` (:func:`compare_results`), so a caller that has the reports
computes nothing twice; :func:`compare` computes them from events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import vocab as V
from neurontrace.analyses.ops import NAME as OP_NAME
from neurontrace.analyses.ops import SELF_NS as OP_SELF_NS
from neurontrace.analyses.report import Report, report
from neurontrace.analyses.steps import median_step_ns

METRICS = (
    "step_ns", "wall_ns", "steps", "host_ns", "device_ns", "device_busy_ns", "idle_ns", "launches",
    "copies", "copy_bytes", "tiny_copies",
)
#: The figures of device work, left out when no run has any.
DEVICE_METRICS = frozenset(METRICS[4:])
OP_PREFIX = "op:"
COLUMNS = ("metric", "run", "value", "ratio")

#: ``top`` for "every row": a :func:`.report.report` made with it holds every op, every
#: copy summary row and every gap, as :class:`Measured` requires.
ALL = 1_000_000


@dataclass(frozen=True)
class Measured:
    """One run's computed results, what :func:`compare_results` reads.

    ``report``: :func:`.report.report` made with ``top=ALL`` (every op and copy summary
    row: a cut table would compare an op missing from it as 0); ``wall_ns``, ``steps``
    and ``step_ns``: :func:`extent`'s.
    """

    report: Report
    wall_ns: int
    steps: int
    step_ns: int | None


def extent(lf: pl.LazyFrame) -> tuple[int, int, int | None]:
    """``(wall_ns, steps, step_ns)``: from the first span's start to the last span's end
    (0 without spans), the number of framework ``ProfilerStep#N`` spans (over every rank)
    and their median duration (:func:`.steps.median_step_ns`; None without steps)."""
    span = lf.filter(V.is_span()).select(
        first=pl.col(S.START_NS).min(),
        last=(pl.col(S.START_NS) + pl.col(S.DUR_NS)).max(),
        steps=pl.col(S.NAME).str.contains(S.STEP_PATTERN)
        .and_(pl.col(S.LAYER) == S.FRAMEWORK).sum(),
    ).collect()
    first, last = span.get_column("first")[0], span.get_column("last")[0]
    wall = int(last - first) if first is not None else 0
    return wall, int(span.get_column("steps")[0] or 0), median_step_ns(lf)


def measure(lf: pl.LazyFrame) -> Measured:
    """What :func:`compare_results` reads of one run, computed from its events."""
    return Measured(report(lf, top=ALL), *extent(lf))


def compare(runs: Mapping[str, pl.LazyFrame], top: int = 5) -> pl.DataFrame:
    """:func:`compare_results` of each run's events (:func:`measure`)."""
    return compare_results({label: measure(lf) for label, lf in runs.items()}, top=top)


def compare_results(runs: Mapping[str, Measured], top: int = 5) -> pl.DataFrame:
    """Long form: ``metric, run, value, ratio`` (ratio to the first run; null where
    either value is null or the first is 0), runs in order; without device work in any
    run, no :data:`DEVICE_METRICS` rows (:func:`host_only`)."""
    if not runs:
        raise ValueError("compare needs at least one run")
    figures = {label: _figures(m) for label, m in runs.items()}
    use_device = not host_only(runs.values())
    tables = {label: m.report.device_ops if use_device
              else m.report.host_ops.filter(pl.col(OP_NAME) != V.PROFILER_STEP_ALL)
              for label, m in runs.items()}
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
    metrics = [m for m in METRICS if use_device or m not in DEVICE_METRICS]
    for metric in (*metrics, *(OP_PREFIX + n for n in names)):
        base = figures[first][metric]
        for label in runs:
            v = figures[label][metric]
            rows.append((metric, label, v, v / base if base and v is not None else None))
    return pl.DataFrame(
        rows, schema={"metric": pl.String, "run": pl.String, "value": pl.Int64,
                      "ratio": pl.Float64}, orient="row",
    )


def host_only(runs: Iterable[Measured]) -> bool:
    """True when no run has device work: no device op and no transfer."""
    return not any(m.report.device_ops.height or m.report.transfers for m in runs)


def _figures(m: Measured) -> dict[str, int | None]:
    r = m.report
    return {
        "step_ns": m.step_ns,
        "wall_ns": m.wall_ns,
        "steps": m.steps,
        "host_ns": int(r.host_ops.get_column(OP_SELF_NS).sum()),
        "device_ns": int(r.device_ops.get_column(OP_SELF_NS).sum()),
        "device_busy_ns": int(r.devices.get_column("busy_ns").sum()),
        "idle_ns": int(r.devices.get_column("idle_ns").sum()),
        "launches": int(r.device_ops.get_column("calls").sum()),
        "copies": r.transfers,
        "copy_bytes": int(r.copies.get_column(S.BYTES).sum()),
        "tiny_copies": int(r.copies.get_column("tiny").sum()),
    }
