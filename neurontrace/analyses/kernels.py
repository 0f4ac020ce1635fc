"""Device work by its own name: the kernel view (``key_averages()``'s device rows, HTA's
kernel breakdown).

One row per name of device work (:func:`.vocab.is_device_work`: kernels, memcpys and
memsets on a stream, NeuronCore executions, MTIA compute and DMA requests; never the
annotations drawn over them, device-side waits or profiler ranges), whatever op launched
it:

- ``calls``: how many times it ran. Rows sharing ``execution`` (one NeuronCore execution
  seen on both cores of an LNC=2 pair) are one call, from its first start to its last
  end, named after its first row;
- ``total_ns``: the sum of the calls' durations; ``mean_ns`` = total / calls (a float);
  ``min_ns``, ``max_ns``: the shortest and the longest call;
- ``share``: total / the total of every name (so the shares add up to 1). Calls on
  different streams that overlap in time are each counted in full: this is time spent
  by each piece of work, not the device's busy time (``gaps`` gives that).

Several ranks (or several streams) add up under one name, as in HTA's breakdown over a
run's ranks. Largest ``total_ns`` first, then name::

    stream 7   |--gemm 40--|  |-relu 10-|     |--gemm 60--|
    stream 20        |---Memcpy DtoD 30---|
    -> gemm:          calls 2, total 100, mean 50, min 40, max 60, share 100/140
       Memcpy DtoD:   calls 1, total 30,  mean 30, min 30, max 30, share 30/140
       relu:          calls 1, total 10,  mean 10, min 10, max 10, share 10/140
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import vocab as V

NAME, CALLS, TOTAL_NS, MEAN_NS, MIN_NS, MAX_NS, SHARE = (
    "name", "calls", "total_ns", "mean_ns", "min_ns", "max_ns", "share")
COLUMNS = (NAME, CALLS, TOTAL_NS, MEAN_NS, MIN_NS, MAX_NS, SHARE)

_SCHEMA = {NAME: pl.String, CALLS: pl.Int64, TOTAL_NS: pl.Int64, MEAN_NS: pl.Float64,
           MIN_NS: pl.Int64, MAX_NS: pl.Int64, SHARE: pl.Float64}


def kernels(lf: pl.LazyFrame) -> pl.DataFrame:
    """Per name of device work: ``name, calls, total_ns, mean_ns, min_ns, max_ns, share``
    (see the module docstring)."""
    calls = (
        lf.filter(V.is_device_work())
        .select(
            S.ROW, S.RANK, S.NAME, S.START_NS,
            _end=pl.col(S.START_NS) + pl.col(S.DUR_NS),
            _key=V.work_key(),
        )
        .group_by(S.RANK, "_key")
        .agg(
            pl.col(S.NAME).sort_by(S.ROW).first(),
            (pl.col("_end").max() - pl.col(S.START_NS).min()).alias(S.DUR_NS),
        )
    )
    out = (
        calls.group_by(S.NAME)
        .agg(
            pl.len().alias(CALLS),
            pl.col(S.DUR_NS).sum().alias(TOTAL_NS),
            pl.col(S.DUR_NS).min().alias(MIN_NS),
            pl.col(S.DUR_NS).max().alias(MAX_NS),
        )
        .collect()
    )
    total = out.get_column(TOTAL_NS).sum() if out.height else 0
    return (
        out.with_columns(
            (pl.col(TOTAL_NS) / pl.col(CALLS)).alias(MEAN_NS),
            (pl.col(TOTAL_NS) / total if total else pl.lit(0.0)).alias(SHARE),
        )
        .cast(_SCHEMA)  # type: ignore[arg-type]
        .select(COLUMNS)
        .sort([TOTAL_NS, NAME], descending=[True, False])
    )
