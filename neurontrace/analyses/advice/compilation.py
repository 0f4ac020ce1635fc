"""Rule ``compile-in-steps``: graph compilation, or a compiled graph loaded, inside the
profiled steps.

**Condition.** Compilation or loading runs inside a step (a row whose step is set):

- torch.compile's compiler records each of its phases as a ``record_function`` range
  named ``<phase> (dynamo_timed)`` (torch's own naming, as ``ProfilerStep#N`` is:
  :data:`COMPILING`) and names each compilation in an annotation ``... compile_id=F/A``
  (frame ``F``, attempt ``A``: ``A`` > 0 is a recompilation of that frame);
- a runtime call loads a compiled model or graph onto the device: role ``load``
  (:data:`neurontrace.schema.LOAD`, which the readers set: a Neuron NEFF loaded by
  ``nrt_load`` / ``nrt_load_collectives``). A load before the first step (warm-up) is
  not counted::

    step 1  |[compile_inner (dynamo_timed) ...............] [Torch-Compiled Region]|
    step 2  |[Torch-Compiled Region]|                                   (cached)
    step 3  |[compile_inner (dynamo_timed) ...] [Torch-Compiled Region]|  compile_id=0/1:
                                                                        a recompile

    step 2  |[aten::mul [nrt_load .........] [nrt_execute]]|   a new graph (NEFF) loaded

**Time at stake** (measured, per step): the time spent compiling or loading inside the
steps (the union of the compiler's ranges and the load calls per rank and thread, each
instant once), over all steps.
"""

from __future__ import annotations

import re

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import intervals as I
from neurontrace.analyses import vocab as V
from neurontrace.analyses.advice.base import HOST, Facts, Finding, per_step, us

RULE = "compile-in-steps"
#: How torch.compile names the ranges its compiler records (``dynamo_timed``).
COMPILING = " (dynamo_timed)"
#: How it names a compilation: ``compile_id=<frame>/<attempt>``.
COMPILE_ID = re.compile(r"compile_id=(\d+)/(\d+)")


def find(facts: Facts) -> list[Finding]:
    if not facts.steps.height:
        return []
    in_steps = facts.lf.filter(V.is_span() & pl.col(S.STEP).is_not_null())
    fw = in_steps.filter(pl.col(S.LAYER) == S.FRAMEWORK)
    compiling = fw.filter(pl.col(S.NAME).str.ends_with(COMPILING))
    loading = in_steps.filter(pl.col(S.ROLE) == S.LOAD)
    spans = pl.concat([compiling.with_columns(_load=pl.lit(False)),
                       loading.with_columns(_load=pl.lit(True))]).select(
        S.RANK, S.TRACK, S.STEP, S.NAME, "_load", start=S.START_NS,
        end=pl.col(S.START_NS) + pl.col(S.DUR_NS)).collect()
    if not spans.height:
        return []
    # per rank and thread, nested phases counted once; a piece's step is its first range's
    pieces = I.union(spans, [S.RANK, S.TRACK], first=[S.STEP]).rename(
        {f"_first_{S.STEP}": S.STEP}).collect()
    ids = fw.filter(pl.col(S.NAME).str.contains(COMPILE_ID.pattern)).select(
        S.STEP, pl.col(S.NAME).str.extract(COMPILE_ID.pattern, 0).alias("id")).unique(
        ).collect()
    compiles = sorted({str(i).removeprefix("compile_id=") for i in ids.get_column("id")})
    recompiles = [c for c in compiles if not c.endswith("/0")]
    loads = spans.filter(pl.col("_load"))
    total = int((pieces.get_column("end") - pieces.get_column("start")).sum())
    at = per_step(total, facts)
    steps = sorted({int(s) for s in pieces.get_column(S.STEP)})
    what = f"{len(compiles)} compilation(s)" if compiles else "compilation"
    again = f", {len(recompiles)} of them recompiles" if recompiles else ""
    loaded = f"{loads.height} model/graph load(s)"
    done = (f"torch.compile ran {what} inside profiled steps{again}" if not loads.height
            else f"{loaded} ran inside profiled steps" if loads.height == spans.height
            else f"torch.compile ran {what}{again} and {loaded} inside profiled steps")
    title = f"{done} (steps {', '.join(map(str, steps))}): {us(total)} in all"
    evidence = {"compile_ids": compiles, "recompiles": recompiles, "steps": steps,
                "compile_ns": total, "per_step": {str(s): int(
                    pieces.filter(pl.col(S.STEP) == s).select(
                        (pl.col("end") - pl.col("start")).sum()).item()) for s in steps},
                "loads": [{"name": n, "step": st, "dur_ns": e - b} for n, st, b, e in
                          loads.sort("start").select(S.NAME, S.STEP, "start", "end")
                          .iter_rows()]}
    hints = []
    if loads.height < spans.height:
        hints.append("compile before profiling (run the compiled function once in warm-up) "
                     "and keep shapes stable, or mark the changing ones dynamic "
                     "(torch._dynamo.mark_dynamic, dynamic=True); TORCH_LOGS=recompiles says "
                     "why a frame recompiled")
    if loads.height:
        hints.append("run every graph once before profiling (warm-up steps with each "
                     "shape), so that it is compiled and loaded outside the steps; a load "
                     "in a later step is a new graph: keep shapes stable (pad or bucket "
                     "them)")
    return [facts.finding(RULE, HOST, title, (), (at, at), evidence, "; ".join(hints))]
