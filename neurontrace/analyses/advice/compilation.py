"""Rule ``compile-in-steps``: graph compilation inside the profiled steps.

**Condition.** Compilation runs inside a step: torch.compile's compiler records each of
its phases as a ``record_function`` range named ``<phase> (dynamo_timed)`` (torch's own
naming, as ``ProfilerStep#N`` is: :data:`COMPILING`) and names each compilation in an
annotation ``... compile_id=F/A`` (frame ``F``, attempt ``A``: ``A`` > 0 is a
recompilation of that frame)::

    step 1  |[compile_inner (dynamo_timed) ...............] [Torch-Compiled Region]|
    step 2  |[Torch-Compiled Region]|                                   (cached)
    step 3  |[compile_inner (dynamo_timed) ...] [Torch-Compiled Region]|  compile_id=0/1:
                                                                        a recompile

**Time at stake** (measured, per step): the time spent compiling inside the steps (the
union of the compiler's ranges, each instant once), over all steps. A Neuron graph
compiled or a NEFF loaded inside a step is not recognised yet: the readers give no role
to those runtime calls.
"""

from __future__ import annotations

import re

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import vocab as V
from neurontrace.analyses.advice.base import HOST, Facts, Finding, per_step, us

RULE = "compile-in-steps"
#: How torch.compile names the ranges its compiler records (``dynamo_timed``).
COMPILING = " (dynamo_timed)"
#: How it names a compilation: ``compile_id=<frame>/<attempt>``.
COMPILE_ID = re.compile(r"compile_id=(\d+)/(\d+)")


def find(facts: Facts) -> list[Finding]:
    fw = facts.lf.filter((pl.col(S.LAYER) == S.FRAMEWORK) & V.is_span()
                         & pl.col(S.STEP).is_not_null())
    ranges = fw.filter(pl.col(S.NAME).str.ends_with(COMPILING)).select(
        S.RANK, S.TRACK, S.STEP, start=S.START_NS, end=pl.col(S.START_NS) + pl.col(S.DUR_NS))
    if not facts.steps.height:
        return []
    pieces = _union(ranges).collect()
    if not pieces.height:
        return []
    ids = fw.filter(pl.col(S.NAME).str.contains(COMPILE_ID.pattern)).select(
        S.STEP, pl.col(S.NAME).str.extract(COMPILE_ID.pattern, 0).alias("id")).unique(
        ).collect()
    compiles = sorted({str(i).removeprefix("compile_id=") for i in ids.get_column("id")})
    recompiles = [c for c in compiles if not c.endswith("/0")]
    total = int((pieces.get_column("end") - pieces.get_column("start")).sum())
    at = per_step(total, facts)
    steps = sorted({int(s) for s in pieces.get_column(S.STEP)})
    what = f"{len(compiles)} compilation(s)" if compiles else "compilation"
    again = f", {len(recompiles)} of them recompiles" if recompiles else ""
    title = (f"torch.compile ran {what} inside profiled steps{again} "
             f"(steps {', '.join(map(str, steps))}): {us(total)} in all")
    evidence = {"compile_ids": compiles, "recompiles": recompiles, "steps": steps,
                "compile_ns": total, "per_step": {str(s): int(
                    pieces.filter(pl.col(S.STEP) == s).select(
                        (pl.col("end") - pl.col("start")).sum()).item()) for s in steps}}
    hint = ("compile before profiling (run the compiled function once in warm-up) and keep "
            "shapes stable, or mark the changing ones dynamic (torch._dynamo.mark_dynamic, "
            "dynamic=True); TORCH_LOGS=recompiles says why a frame recompiled")
    return [facts.finding(RULE, HOST, title, (), (at, at), evidence, hint)]


def _union(ranges: pl.LazyFrame) -> pl.LazyFrame:
    """The union of ``ranges`` per rank and thread (nested phases counted once):
    ``rank, track, start, end, step`` (the first range's step)."""
    keys = [S.RANK, S.TRACK]
    reach = pl.col("end").cum_max().shift(1).over(keys)
    piece = (pl.col("start") > reach).fill_null(True).cum_sum().over(keys)
    return (
        ranges.sort(*keys, "start")
        .with_columns(_piece=piece)
        .group_by(*keys, "_piece")
        .agg(pl.col("start").min(), pl.col("end").max(), pl.col(S.STEP).first())
        .drop("_piece")
    )
