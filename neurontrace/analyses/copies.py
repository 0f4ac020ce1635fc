"""Copy detection: every transfer (host to device, device to host, device to device,
peer to peer), and the op that caused it.

A **transfer** is data moved between host and device (or between devices), seen as one
or more events of the runtime and device layers (:func:`.vocab.is_copy`): the rows the
readers gave a ``direction`` (device transfers, and the runtime calls that request one)
and the runtime calls that copy (role ``transfer``) even where they do not say which
way; a device memset (a transfer without a direction) is not a copy. E.g. a CUDA copy
call and its device copy on a stream; a Neuron tensor write and the device buffer copy
under it. Events are one transfer when they share a ``correlation`` or a flow arrow, or
when one is nested in another on its track; the transfer is reported once::

    framework  |------------------ aten::add ------------------|     op  = aten::add
                  |--------- aten::_to_copy ---------|
                     |------ aten::copy_ ------|                      via = aten::copy_
    runtime             |tensor write 4 B|                            layers: framework,
    device                 |buffer copy h2d|                          runtime, device

- ``start_ns``, ``dur_ns``: of the device event when there is one (the movement itself),
  else of the outermost runtime call;
- ``bytes``: the data moved: the sum of its device events' byte counts (a request
  carried out as several DMAs) or the largest count a runtime event gives, whichever
  is larger; null when no event gives a size;
- ``tiny``: a host-to-device transfer of at most :data:`.vocab.TINY_BYTES` bytes (a
  scalar, such as an ``eps`` that lives on the host and is copied before every use);
  false for every other direction (a small device-to-device or peer copy is no host
  scalar); null for ``h2d`` of unknown size and when the direction is unknown;
- ``direction``: ``h2d``, ``d2h``, ``d2d`` or ``p2p``: the events' ``direction``, the
  device side's first; null when none says (a copy call alone, its kind not recorded);
- ``via``: the framework op the transfer's events are linked to (``framework_row``):
  the innermost op that made it; ``op``: the outermost framework operator above
  ``via`` on its thread, the call the user wrote (``aten::add``, not the
  ``aten::_to_copy`` it went through); ``(unlinked)`` when no link was found;
- ``layers``: the layers that saw it; ``framework`` counts when a copy op
  (``aten::copy_``, ``aten::_to_copy``, ``aten::to``) is ``via`` or above it.

A framework copy op with no transfer beneath it is not reported: Kineto records no
device for its tensors (the device in ``Concrete Inputs`` is left blank), so a CPU to
CPU ``aten::to`` cannot be told from a host-to-device one.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import vocab as V
from neurontrace.analyses.ops import UNLINKED

COLUMNS = (S.RANK, S.START_NS, S.DUR_NS, S.BYTES, "direction", "op", "via", "tiny", "layers")
SUMMARY_COLUMNS = ("op", "direction", "copies", "bytes", S.DUR_NS, "tiny")
DIRECTION_COLUMNS = ("direction", "copies", "bytes", "unsized", S.DUR_NS, "tiny")

#: Ancestors walked up from ``via`` to find the outermost operator.
_MAX_DEPTH = 256


def copies(lf: pl.LazyFrame) -> pl.DataFrame:
    """Every transfer, once, in time order (see the module docstring)."""
    events = (
        lf.filter(V.is_copy())
        .select(
            S.ROW, S.RANK, S.LAYER, S.START_NS, S.DUR_NS, S.BYTES, S.CORRELATION,
            S.FLOW_IDS, S.PARENT, S.FRAMEWORK_ROW, S.DIRECTION,
        )
        .collect()
    )
    events = events.with_columns(transfer=_transfers(events))
    device_first = pl.col(S.LAYER) != S.DEVICE
    per = (
        events.sort(device_first, -pl.col(S.DUR_NS), S.ROW)
        .group_by("transfer", maintain_order=True)
        .agg(
            pl.col(S.RANK).first(),
            pl.col(S.START_NS).first(),
            pl.col(S.DUR_NS).first(),
            pl.col(S.BYTES).max(),
            pl.col(S.BYTES).filter(pl.col(S.LAYER) == S.DEVICE).sum().alias("_device_bytes"),
            pl.col(S.BYTES).filter(pl.col(S.LAYER) == S.DEVICE).count().alias("_device_sized"),
            pl.col("direction").drop_nulls().first(),
            pl.col(S.FRAMEWORK_ROW).drop_nulls().first(),
            pl.col(S.LAYER).unique().alias("layers"),
        )
    )
    device_bytes = pl.when(pl.col("_device_sized") > 0).then("_device_bytes")
    per = per.with_columns(pl.max_horizontal(S.BYTES, device_bytes).alias(S.BYTES)).drop(
        "_device_bytes", "_device_sized")
    per = per.join(_callers(lf, per.get_column(S.FRAMEWORK_ROW)), on=S.FRAMEWORK_ROW,
                   how="left")
    layer_order = {layer: i for i, layer in enumerate(S.LAYERS)}
    return (
        per.with_columns(
            pl.col("via").fill_null(UNLINKED),
            pl.col("op").fill_null(pl.col("via")).fill_null(UNLINKED),
            pl.when(pl.col("direction") == S.H2D).then(pl.col(S.BYTES) <= V.TINY_BYTES)
            .when(pl.col("direction").is_not_null()).then(False).alias("tiny"),
            pl.when(pl.col("_framework_copy").fill_null(False))
            .then(pl.col("layers").list.concat(pl.lit([S.FRAMEWORK])))
            .otherwise(pl.col("layers"))
            .list.eval(pl.element().sort_by(pl.element().replace_strict(layer_order)))
            .alias("layers"),
        )
        .select(COLUMNS)
        .sort(S.RANK, S.START_NS)
    )


def copy_summary(transfers: pl.DataFrame) -> pl.DataFrame:
    """Per ``op`` and ``direction``: ``copies``, ``bytes``, ``dur_ns``, ``tiny`` (count)."""
    return (
        transfers.group_by("op", "direction")
        .agg(
            pl.len().cast(pl.Int64).alias("copies"),
            pl.when(pl.col(S.BYTES).count() > 0).then(pl.col(S.BYTES).sum()).alias("bytes"),
            pl.col(S.DUR_NS).sum().alias(S.DUR_NS),
            pl.col("tiny").sum().cast(pl.Int64).alias("tiny"),
        )
        .sort(["copies", "bytes", "op"], descending=[True, True, False], nulls_last=True)
        .select(SUMMARY_COLUMNS)
    )


def by_direction(transfers: pl.DataFrame) -> pl.DataFrame:
    """Per ``direction`` (``h2d``, ``d2h``, ``d2d``, ``p2p`` in that order, then null for
    copy calls that do not say): ``copies``, ``bytes`` (the sum of the known sizes; null
    when none is known), ``unsized`` (transfers of unknown size), ``dur_ns``, ``tiny``
    (count; only ``h2d`` has any)."""
    order = {d: i for i, d in enumerate(S.DIRECTIONS)}
    return (
        transfers.group_by("direction")
        .agg(
            pl.len().cast(pl.Int64).alias("copies"),
            pl.when(pl.col(S.BYTES).count() > 0).then(pl.col(S.BYTES).sum()).alias("bytes"),
            pl.col(S.BYTES).null_count().cast(pl.Int64).alias("unsized"),
            pl.col(S.DUR_NS).sum().alias(S.DUR_NS),
            pl.col("tiny").sum().cast(pl.Int64).alias("tiny"),
        )
        .sort(pl.col("direction").replace_strict(order, default=len(order),
                                                 return_dtype=pl.Int64))
        .select(DIRECTION_COLUMNS)
    )


def _transfers(events: pl.DataFrame) -> pl.Series:
    """A transfer id per copy event: connected components of the "same transfer" edges.

    Edges: same ``(rank, correlation)``, a shared flow id, a copy nested in a copy.
    Labels spread as the minimum row over each edge until nothing changes (components
    are a handful of events, so this takes a few rounds).
    """
    label = events.select(S.ROW, S.RANK, S.CORRELATION, S.FLOW_IDS, S.PARENT,
                          _label=pl.col(S.ROW))
    rows = set(events.get_column(S.ROW).to_list())
    nested = label.filter(pl.col(S.PARENT).is_in(list(rows)))
    flows = label.select(S.ROW, S.RANK, _fid=S.FLOW_IDS).explode("_fid").drop_nulls("_fid")
    for _ in range(64):
        before = label.get_column("_label")
        low = [
            label.group_by(S.RANK, S.CORRELATION)
            .agg(_l=pl.col("_label").min())
            .drop_nulls(S.CORRELATION)
            .join(label.select(S.ROW, S.RANK, S.CORRELATION), on=[S.RANK, S.CORRELATION])
            .select(S.ROW, "_l"),
            flows.join(label.select(S.ROW, "_label"), on=S.ROW)
            .group_by(S.RANK, "_fid").agg(_l=pl.col("_label").min())
            .join(flows, on=[S.RANK, "_fid"])
            .select(S.ROW, "_l"),
            # child -> parent and parent -> child
            nested.select(S.ROW, S.PARENT)
            .join(label.select(pl.col(S.ROW).alias(S.PARENT), _l="_label"), on=S.PARENT)
            .select(S.ROW, "_l"),
            nested.select(S.ROW, S.PARENT)
            .join(label.select(S.ROW, _l="_label"), on=S.ROW)
            .select(pl.col(S.PARENT).alias(S.ROW), "_l"),
        ]
        best = pl.concat(low).group_by(S.ROW).agg(pl.col("_l").min())
        label = label.join(best, on=S.ROW, how="left").with_columns(
            _label=pl.min_horizontal("_label", "_l")
        ).drop("_l")
        if label.get_column("_label").equals(before):
            break
    return label.get_column("_label").alias("transfer")


def _callers(lf: pl.LazyFrame, rows: pl.Series) -> pl.DataFrame:
    """For each framework row: ``via`` (its name), ``op`` (the outermost operator at or
    above it) and ``_framework_copy`` (a framework copy op at or above it)."""
    wanted = rows.drop_nulls().unique()
    empty = pl.DataFrame(schema={S.FRAMEWORK_ROW: pl.Int64, "via": pl.String,
                                 "op": pl.String, "_framework_copy": pl.Boolean})
    if wanted.len() == 0:
        return empty
    fw = (
        lf.filter(pl.col(S.LAYER) == S.FRAMEWORK)
        .select(S.ROW, S.PARENT, V.op_name().alias(S.NAME),
                _is_op=pl.col(S.ROLE) == S.OPERATOR)
        .collect()
    )
    cur = (
        fw.filter(pl.col(S.ROW).is_in(wanted.implode()))
        .select(
            pl.col(S.ROW).alias(S.FRAMEWORK_ROW),
            pl.col(S.NAME).alias("via"),
            pl.when("_is_op").then(pl.col(S.NAME)).alias("op"),
            pl.col(S.NAME).is_in(V.FRAMEWORK_COPY_OPS).alias("_framework_copy"),
            _up=pl.col(S.PARENT),
        )
    )
    up = fw.select(pl.col(S.ROW).alias("_up"), pl.col(S.PARENT).alias("_next"),
                   pl.col(S.NAME).alias("_name"), "_is_op")
    done = []
    for _ in range(_MAX_DEPTH):
        walking = cur.filter(pl.col("_up").is_not_null())
        done.append(cur.filter(pl.col("_up").is_null()))
        if walking.height == 0:
            break
        cur = walking.join(up, on="_up", how="left").select(
            S.FRAMEWORK_ROW, "via",
            pl.when(pl.col("_is_op").fill_null(False)).then("_name").otherwise("op")
            .alias("op"),
            (pl.col("_framework_copy") | pl.col("_name").is_in(V.FRAMEWORK_COPY_OPS)
             .fill_null(False)).alias("_framework_copy"),
            _up=pl.col("_next"),
        )
    else:
        done.append(cur)
    return pl.concat(done).drop("_up") if done else empty


def largest(transfers: pl.DataFrame, n: int) -> pl.DataFrame:
    """The ``n`` largest of :func:`copies`' transfers, largest first: by ``bytes`` (a
    transfer of unknown size last), then in time order; every transfer, in time order,
    when ``n`` is 0 or at least their number."""
    if n == 0 or n >= transfers.height:
        return transfers
    return transfers.sort(
        [S.BYTES, S.START_NS], descending=[True, False], nulls_last=True, maintain_order=True
    ).head(n)
