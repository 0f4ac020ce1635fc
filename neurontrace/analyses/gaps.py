"""Gap analysis: when each device sat idle, and what the host was doing meanwhile.

Idle time is measured twice: per **device** (a GPU, a NeuronCore, an MTIA chip; one per
``rank, device``), where work on any of its streams or queues keeps it busy, so its busy
time is the union over all of them; and per device **track** (a GPU stream, a NeuronCore
engine; one per ``rank, track``), a detail: a copy stream is naturally silent while the
compute stream works, so a track's idle time is not the device's. ``device`` is the
row's ``device`` column, else its ``pid`` (MTIA writes no device index; its pid is the
chip).

Terms, per device or per track::

    device   |== A ==|      gap 1       |= B =|  gap 2  |==== C ====|
    host      [aten::mul ...........[launch B]]  [stream synchronize]
             ^                                                       ^
             span: first device start ............ last device end

- **work**: device-layer spans that occupy the device (kernels, copies, NeuronCore
  executions); annotations drawn over kernels and device-side waits are not work
  (:func:`.vocab.is_device_work`).
- **busy**: the union of the work's intervals; **idle** = span - busy.
- **gap**: a stretch of idle time between two pieces of work; ``before`` and ``after``
  name the work that ends it on the left and starts it on the right.
- **cause** of a gap, from what overlaps it in the other layers of the same rank. Each
  instant of the gap is explained by the first of these that holds at that instant,
  and the gap's cause is the one explaining the most of it (ties in this order):

  1. ``h2d_copy``: a host-to-device copy (runtime call or transfer on another track)
     is in progress: the device waits for data;
  2. ``sync``: a synchronisation is in progress (a ``sync`` runtime call such as a
     stream synchronize, or a device-side ``wait``);
  3. ``launch_latency``: the launch of the work after the gap (the runtime call with
     its ``correlation``, or a flow arrow) has begun and the work has not started;
  4. ``host_dispatch``: a framework op is running on the host and nothing has been
     launched yet;
  5. ``unknown``: none of these overlaps the gap.

  A copy made inside an op (``aten::add`` -> a tensor write) thus counts as the copy,
  not as the op around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import intervals as I
from neurontrace.analyses import vocab as V

H2D_COPY, SYNC, LAUNCH, DISPATCH, UNKNOWN = (
    "h2d_copy", "sync", "launch_latency", "host_dispatch", "unknown",
)
#: Causes in their order of precedence (ties go to the first).
CAUSES = (H2D_COPY, SYNC, LAUNCH, DISPATCH, UNKNOWN)

TRACK_KEYS = (S.RANK, S.TRACK)
DEVICE_KEYS = (S.RANK, S.DEVICE_COL)


@dataclass(frozen=True)
class Gaps:
    """``devices``: one row per device (the union of its streams or queues): ``rank,
    device, label`` (its tracks' common name, e.g. ``GPU 0``), ``tracks`` (how many of its
    tracks have work), ``start_ns`` (of its first work), ``span_ns`` (first start to last
    end), ``busy_ns`` (the union of all its work), ``idle_ns = span_ns - busy_ns``,
    ``gaps`` (how many gaps are listed) and ``<cause>_ns`` (idle time per cause).

    ``device_gaps``: ``rank, device, label, start_ns, dur_ns, cause, before, after``: the
    stretches when no stream of the device had work, by device and time.

    ``tracks``: the same per device track (``rank, track, device, start_ns, span_ns, ...``),
    a detail; ``gaps``: ``rank, track, start_ns, dur_ns, cause, before, after``, each
    track's own gaps, by track and time.
    """

    tracks: pl.DataFrame
    gaps: pl.DataFrame
    devices: pl.DataFrame
    device_gaps: pl.DataFrame


def gaps(lf: pl.LazyFrame, min_gap_ns: int = 0) -> Gaps:
    """Idle time per device and per device track, and each gap with its cause (see the
    module docstring).

    ``min_gap_ns`` limits the listed gaps (and the ``gaps`` counts) to those lasting at
    least that long; ``idle_ns`` and the per-cause totals always include every gap.
    """
    names = (
        work(lf).group_by(*TRACK_KEYS)
        .agg(pl.col(S.DEVICE_COL).first(),
             label=pl.col(S.TRACK).first().str.split(" / ").list.first())
        .collect()
    )
    tracks, per_track = _table(lf, TRACK_KEYS, min_gap_ns)
    tracks = tracks.join(names.select(*TRACK_KEYS, S.DEVICE_COL), on=TRACK_KEYS, how="left",
                         nulls_equal=True).select(S.RANK, S.TRACK, S.DEVICE_COL,
                                                  pl.exclude(S.RANK, S.TRACK, S.DEVICE_COL))
    devices, per_device = _table(lf, DEVICE_KEYS, min_gap_ns)
    labels = names.group_by(*DEVICE_KEYS).agg(
        label=pl.col("label").sort().first(), tracks=pl.len().cast(pl.Int64)
    )
    devices = devices.join(labels, on=DEVICE_KEYS, how="left", nulls_equal=True).select(
        *DEVICE_KEYS, "label", "tracks", pl.exclude(*DEVICE_KEYS, "label", "tracks")
    )
    per_device = per_device.join(
        labels.select(*DEVICE_KEYS, "label"), on=DEVICE_KEYS, how="left", nulls_equal=True
    ).select(*DEVICE_KEYS, "label", pl.exclude(*DEVICE_KEYS, "label"))
    return Gaps(tracks=tracks, gaps=per_track, devices=devices, device_gaps=per_device)


def _table(lf: pl.LazyFrame, keys: Sequence[str], min_gap_ns: int
           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per ``keys`` group: ``keys..., start_ns, span_ns, busy_ns, idle_ns, gaps,
    <cause>_ns``; and its listed gaps, ``keys..., start_ns, dur_ns, cause, before,
    after``."""
    pieces, classified = idle(lf, keys)
    found = classified.collect()
    by_cause = found.group_by(*keys).agg(
        pl.col(S.DUR_NS).filter(pl.col("cause") == c).sum().alias(f"{c}_ns") for c in CAUSES
    )
    listed = found.filter(pl.col(S.DUR_NS) >= max(min_gap_ns, 1))
    table = (
        pieces.group_by(*keys)
        .agg(
            start_ns=pl.col("start").min(),
            span_ns=pl.col("end").max() - pl.col("start").min(),
            busy_ns=(pl.col("end") - pl.col("start")).sum(),
        )
        .with_columns(idle_ns=pl.col("span_ns") - pl.col("busy_ns"))
        .collect()
        .join(listed.group_by(*keys).agg(gaps=pl.len().cast(pl.Int64)),
              on=keys, how="left", nulls_equal=True)
        .join(by_cause, on=keys, how="left", nulls_equal=True)
        .with_columns(pl.col("gaps", *(f"{c}_ns" for c in CAUSES)).fill_null(0))
        .sort(*keys)
    )
    return table, (
        listed.select(*keys, S.START_NS, S.DUR_NS, "cause", "before", "after")
        .sort(*keys, S.START_NS)
    )


def work(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Device work rows of non-zero length: ``row, rank, track, device, name, start,
    end``; ``device`` is the row's ``device``, else its ``pid``."""
    return lf.filter(V.is_device_work() & (pl.col(S.DUR_NS) > 0)).select(
        S.ROW, S.RANK, S.TRACK, S.NAME,
        pl.coalesce(pl.col(S.DEVICE_COL), pl.col(S.PID)).alias(S.DEVICE_COL),
        start=pl.col(S.START_NS), end=pl.col(S.START_NS) + pl.col(S.DUR_NS),
    )


def idle(lf: pl.LazyFrame, by: Sequence[str]) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Busy pieces and classified gaps, grouping device work by ``by`` columns.

    ``by`` is ``(rank, track)`` for per-track gaps, ``(rank,)`` to treat all of a rank's
    device tracks as one device (a step is idle only when every track is). Returns
    ``pieces`` (``by..., start, end``: the busy union) and ``gaps`` (``by..., start_ns,
    dur_ns, cause, before, after`` and the time each cause covers, ``<cause>_cover``).
    """
    keys = list(by)
    pieces = I.union(
        work(lf), keys,
        first=[
            pl.col(S.NAME).sort_by("end").last().alias("_last_name"),
            pl.col(S.NAME).sort_by("start").first().alias("_first_name"),
            pl.col(S.ROW).sort_by("start").first().alias("_first_row"),
        ],
    ).collect().lazy()
    nxt = (lambda e: e.shift(-1).over(keys)) if keys else (lambda e: e.shift(-1))
    found = (
        pieces.with_columns(
            g_start=pl.col("end"),
            g_end=nxt(pl.col("start")),
            before=pl.col("_last_name"),
            after=nxt(pl.col("_first_name")),
            _next_row=nxt(pl.col("_first_row")),
        )
        .filter(pl.col("g_end").is_not_null() & (pl.col("g_end") > pl.col("g_start")))
        .select(*keys, "g_start", "g_end", "before", "after", "_next_row")
    )
    found = found.join(_launch_starts(lf), left_on="_next_row", right_on=S.ROW, how="left")
    found = found.with_columns(
        _cut=pl.min_horizontal(pl.col("g_end"), pl.col("_launch").fill_null(pl.col("g_end")))
        .clip(lower_bound=pl.col("g_start"))
    )
    # Each instant of a gap goes to the first explanation that holds then (copy, sync,
    # launch once issued, framework op), so one event nested in another (a copy inside
    # an op) counts for the more specific: unions of the first k kinds, differenced.
    copy = _spans(lf, V.is_copy() & (pl.col(S.DIRECTION) == V.H2D))
    sync = _spans(lf, V.is_sync())
    host = _spans(lf, V.is_op())
    u_c = _union(copy)
    u_cs = _union(pl.concat([copy, sync]))
    u_cso = _union(pl.concat([copy, sync, host]))
    on = [S.RANK]
    found = I.overlap(u_c, found, on, "g_start", "g_end", "_c")
    found = I.overlap(u_cs, found, on, "g_start", "g_end", "_cs")
    found = I.overlap(u_cs, found, on, "g_start", "_cut", "_cs_pre")
    found = I.overlap(u_cso, found, on, "g_start", "_cut", "_cso_pre")
    found = found.with_columns(
        pl.col("_c").alias(f"{H2D_COPY}_cover"),
        (pl.col("_cs") - pl.col("_c")).alias(f"{SYNC}_cover"),
        (pl.col("g_end") - pl.col("_cut") - (pl.col("_cs") - pl.col("_cs_pre")))
        .alias(f"{LAUNCH}_cover"),
        (pl.col("_cso_pre") - pl.col("_cs_pre")).alias(f"{DISPATCH}_cover"),
    ).drop("_c", "_cs", "_cs_pre", "_cso_pre")
    covers = [pl.col(f"{c}_cover") for c in CAUSES if c != UNKNOWN]
    best = pl.max_horizontal(covers)
    cause: pl.Expr = pl.lit(UNKNOWN)
    for c in reversed(CAUSES[:-1]):  # built inside out: the first cause wins ties
        cause = pl.when(pl.col(f"{c}_cover") == best).then(pl.lit(c)).otherwise(cause)
    found = found.with_columns(
        start_ns=pl.col("g_start"),
        dur_ns=pl.col("g_end") - pl.col("g_start"),
        cause=pl.when(best <= 0).then(pl.lit(UNKNOWN)).otherwise(cause),
    ).drop("g_start", "g_end", "_cut", "_launch", "_next_row")
    return pieces.select(*keys, "start", "end"), found


def _spans(lf: pl.LazyFrame, which: pl.Expr) -> pl.LazyFrame:
    """``rank, start, end`` of the rows ``which`` selects, read once (used in 1-3 unions)."""
    return lf.filter(which).select(
        S.RANK, start=pl.col(S.START_NS), end=pl.col(S.START_NS) + pl.col(S.DUR_NS)
    ).collect().lazy()


def _union(spans: pl.LazyFrame) -> pl.LazyFrame:
    return I.union(spans, [S.RANK]).collect().lazy()


def _launch_starts(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``row, _launch``: for device work, the start of the runtime call that launched it.

    Found through ``correlation`` (CUDA, and any reader that fills it), else through a
    flow arrow shared with a runtime row (Neuron's dispatch -> runtime -> hardware flows).
    """
    dev = lf.filter(V.is_device_work()).select(S.ROW, S.RANK, S.CORRELATION, S.FLOW_IDS)
    rt = lf.filter((pl.col(S.LAYER) == S.RUNTIME) & V.is_span())
    by_corr = (
        rt.filter(pl.col(S.CORRELATION).is_not_null())
        .group_by(S.RANK, S.CORRELATION)
        .agg(_corr=pl.col(S.START_NS).min())
    )
    by_flow = (
        rt.filter(pl.col(S.FLOW_IDS).list.len() > 0)
        .select(S.RANK, S.START_NS, _fid=pl.col(S.FLOW_IDS))
        .explode("_fid")
        .group_by(S.RANK, "_fid")
        .agg(_flow=pl.col(S.START_NS).min())
    )
    flows = (
        dev.filter(pl.col(S.FLOW_IDS).list.len() > 0)
        .select(S.ROW, S.RANK, _fid=pl.col(S.FLOW_IDS))
        .explode("_fid")
        .join(by_flow, on=[S.RANK, "_fid"])
        .group_by(S.ROW)
        .agg(pl.col("_flow").min())
    )
    return (
        dev.join(by_corr, on=[S.RANK, S.CORRELATION], how="left")
        .join(flows, on=S.ROW, how="left")
        .select(S.ROW, _launch=pl.coalesce("_corr", "_flow"))
    )
