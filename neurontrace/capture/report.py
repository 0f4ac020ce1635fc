"""The few lines a capture ends with: per variant, events, step time and the top ops.

Computed from the converted event tables (so it shows what the analyses will see), and
self-contained: the full comparison is ``neurontrace compare``, printed after it.

Op share: where the trace has device events (CUDA kernels, NeuronCore work), each op's
share of device time, device events counted under the framework op that launched them
(``framework_row``); otherwise each op's share of self CPU time over ``cpu_op`` events,
the ``key_averages()`` view.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

import neurontrace
from neurontrace import schema as S

STEP_PREFIX = "ProfilerStep#"
TOP = 3


@dataclass
class Summary:
    name: str
    events: int = 0
    steps: int = 0
    step_ns: int | None = None  # median ProfilerStep duration
    basis: str = ""  # "device time" | "self CPU time"
    top: list[tuple[str, float]] = field(default_factory=list)  # (op, share 0-1)
    skipped: str | None = None


def summarise(name: str, events: Path, top: int = TOP) -> Summary:
    lf = neurontrace.scan(events)
    n = lf.select(pl.len()).collect().item()
    steps = (lf.filter(pl.col(S.NAME).str.starts_with(STEP_PREFIX)
                       & (pl.col(S.LAYER) == S.FRAMEWORK))
             .select(pl.col(S.DUR_NS)).collect()[S.DUR_NS])
    spans = lf.filter(pl.col(S.KIND) == S.SPAN)
    device = spans.filter(pl.col(S.LAYER) == S.DEVICE)
    if device.select(pl.len()).collect().item():
        ops = lf.select(pl.col(S.ROW).alias(S.FRAMEWORK_ROW), pl.col(S.NAME).alias("op"))
        timed = (device.join(ops, on=S.FRAMEWORK_ROW, how="left")
                 .select(pl.col("op").fill_null(pl.col(S.NAME)), pl.col(S.DUR_NS).alias("t")))
        basis = "device time"
    else:
        timed = (spans.filter(pl.col(S.CATEGORY) == "cpu_op")
                 .select(pl.col(S.NAME).alias("op"), pl.col(S.SELF_NS).alias("t")))
        basis = "self CPU time"
    shares = (timed.group_by("op").agg(pl.col("t").sum())
              .with_columns(share=pl.col("t") / pl.col("t").sum())
              .sort(["t", "op"], descending=[True, False]).head(top).collect())
    return Summary(
        name=name,
        events=n,
        steps=len(steps),
        step_ns=int(steps.median()) if len(steps) else None,  # type: ignore[arg-type]
        basis=basis,
        top=[(r["op"], float(r["share"])) for r in shares.iter_rows(named=True)],
    )


def compare_command(events: list[Path]) -> str:
    return "neurontrace compare " + " ".join(shlex.quote(str(p)) for p in events)


def _ms(ns: int | None) -> str:
    return f"{ns / 1e6:.3f} ms" if ns is not None else "-"


def render(summaries: list[Summary], label: str = "variant") -> list[str]:
    """A small fixed-width table, one variant (or rank) a line."""
    width = max([len(label), *(len(s.name) for s in summaries)])
    basis = sorted({s.basis for s in summaries if s.basis}) or ["self CPU time"]
    lines = [f"{label:<{width}}  {'events':>7}  {'step (median)':>13}  "
             f"top ops by {' / '.join(basis)}"]
    for s in summaries:
        if s.skipped is not None:
            lines.append(f"{s.name:<{width}}  SKIPPED: {s.skipped}")
            continue
        top = ", ".join(f"{op} {share:.1%}" for op, share in s.top) or "-"
        lines.append(f"{s.name:<{width}}  {s.events:>7,}  {_ms(s.step_ns):>13}  {top}")
    return lines
