"""Synthetic event tables for the analyses' tests (SYNTHETIC: made up, not captured).

No Neuron capture is public, so Neuron-shaped cases are built here from the schema and
the Neuron runtime vocabulary of ``../shared/docs/formats.md`` §5 (``nrt_tensor_write``,
``dmem_buf_copyin``, ``nc_exec_running``, ...); CUDA-shaped ones follow the Kineto
categories and names of the real traces in ``../shared/corpus/kineto``. Each test builds
the few rows its edge case needs; everything not given takes a neutral default, and
``parent`` / ``depth`` / ``self_ns`` are derived per track with the project's own
:func:`neurontrace.table.nesting.nest`, as the assembler does.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from neurontrace import schema as S
from neurontrace.readers import neuron as N
from neurontrace.readers.kineto import roles as K
from neurontrace.table.nesting import nest

HOST = "thread 1 (python)"
NC0 = "nc 0"
STREAM7 = "GPU 0 / stream 7"


def ev(name: str, start: int, dur: int, layer: str = S.FRAMEWORK, **cols: Any) -> dict[str, Any]:
    """One span; ``category`` defaults by layer (``cpu_op``, runtime, ``kernel``)."""
    default_cat = {S.FRAMEWORK: "cpu_op", S.RUNTIME: "neuron_runtime", S.DEVICE: "kernel"}
    default_track = {S.FRAMEWORK: HOST, S.RUNTIME: HOST, S.DEVICE: NC0}
    row = {
        S.LAYER: layer,
        S.CATEGORY: default_cat[layer],
        S.NAME: name,
        S.KIND: S.SPAN,
        S.START_NS: start,
        S.DUR_NS: dur,
        S.TRACK: default_track[layer],
        S.PID: 1,
        S.TID: 1 if layer != S.DEVICE else 100,
        S.RANK: 0,
    }
    row.update(cols)
    return row


def op(name: str, start: int, dur: int, **cols: Any) -> dict[str, Any]:
    return ev(name, start, dur, S.FRAMEWORK, **cols)


def rt(name: str, start: int, dur: int, **cols: Any) -> dict[str, Any]:
    return ev(name, start, dur, S.RUNTIME, **cols)


def dev(name: str, start: int, dur: int, **cols: Any) -> dict[str, Any]:
    return ev(name, start, dur, S.DEVICE, **cols)


def table(*rows: dict[str, Any]) -> pl.LazyFrame:
    """The rows as an event table (schema v1), ``row`` numbered in the given order."""
    data: dict[str, list[Any]] = {c: [] for c in S.NAMES}
    for i, r in enumerate(rows):
        unknown = set(r) - set(S.NAMES)
        assert not unknown, f"not schema columns: {unknown}"
        for c in S.NAMES:
            data[c].append(r.get(c, i if c == S.ROW else None))
    t = pa.table({c.name: pa.array(data[c.name], c.type) for c in S.COLUMNS}, schema=S.SCHEMA)
    df = pl.from_arrow(t)
    assert isinstance(df, pl.DataFrame)
    spans = df.filter(pl.col(S.KIND) == S.SPAN).select(
        row=S.ROW,
        lane=pl.struct(S.RANK, S.TRACK).rank("dense"),
        start=S.START_NS,
        dur=S.DUR_NS,
        covered=pl.lit(0, pl.Int64),  # none nested before
        old=False,
    )
    df = df.with_columns(_classified(df))
    tree = nest(spans)[0].select(S.ROW, S.PARENT, S.DEPTH, S.SELF_NS)
    given = df.select(S.ROW, *(pl.col(c).alias(f"_{c}") for c in (S.PARENT, S.DEPTH, S.SELF_NS)))
    df = (
        df.drop(S.PARENT, S.DEPTH, S.SELF_NS)
        .join(tree, on=S.ROW, how="left")
        .join(given, on=S.ROW)
        .with_columns(pl.coalesce(f"_{c}", c).alias(c) for c in (S.PARENT, S.DEPTH, S.SELF_NS))
        .select(S.NAMES)
        .sort(S.ROW)
    )
    return df.lazy()


def _classified(df: pl.DataFrame) -> list[pl.Expr]:
    """``role`` and ``direction`` where a row does not give them, as the readers set
    them: by the Neuron vocabulary for its names and categories, else by Kineto's."""
    layer, cat, name, kind = (pl.col(c) for c in (S.LAYER, S.CATEGORY, S.NAME, S.KIND))
    kineto = K.classify(df)
    neuron_named = (
        name.is_in([*N.COMPUTE_EVENTS, *N.WAIT_EVENTS, *N.MARKER_EVENTS, *N.COPY_DIRECTIONS])
        | name.str.contains(N.SYNC_CALLS)
        | cat.fill_null("").is_in([*N.TRANSFER_TABLES, *N.SUMMARY_TABLES,
                                   "Instruction", "instruction"])
    )
    return [
        pl.coalesce(pl.col(S.ROLE), pl.when(neuron_named).then(N.role(layer, cat, name, kind))
                    .otherwise(pl.lit(kineto.get_column(S.ROLE)))).alias(S.ROLE),
        pl.coalesce(pl.col(S.DIRECTION), N.direction(name),
                    pl.lit(kineto.get_column(S.DIRECTION))).alias(S.DIRECTION),
    ]


def shuffled(lf: pl.LazyFrame, seed: int) -> pl.LazyFrame:
    """The same table with its rows in another order (row numbers unchanged)."""
    return lf.collect().sample(fraction=1.0, shuffle=True, seed=seed).lazy()
