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
- **cause**, from what overlaps the gap in the other layers of the same rank. Each
  instant of a gap is explained by the first of these that holds at that instant; a
  cause's total (``<cause>_ns``) is the time it explains, so the totals add up to the
  idle time; a listed gap's ``cause`` is the one explaining most of it (ties in this
  order):

  1. ``h2d_copy``: a host-to-device copy (runtime call or transfer on another track)
     is in progress: the device waits for data;
  2. ``sync``: a synchronisation is in progress (a ``sync`` runtime call such as a
     stream synchronize, or a device-side ``wait``);
  3. ``launch_latency``: the launch of the work after the gap (the runtime call
     :mod:`.launches` pairs it with: its ``correlation``, else a flow arrow) has begun
     and the work has not started;
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
from neurontrace.analyses.launches import call_by_flow, call_of_correlation

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
    ``gaps`` (how many gaps are listed) and ``<cause>_ns`` (idle time per cause, split
    instant by instant: they add up to ``idle_ns``).

    ``device_gaps``: ``rank, device, label, start_ns, dur_ns, cause, before, after``: the
    stretches when no stream of the device had work, by device and time; ``cause`` is
    the one explaining most of the gap.

    ``tracks``: the same per device track (``rank, track, device, start_ns, span_ns, ...``),
    a detail; ``gaps``: ``rank, track, start_ns, dur_ns, cause, before, after``, each
    track's own gaps, by track and time.
    """

    tracks: pl.DataFrame
    gaps: pl.DataFrame
    devices: pl.DataFrame
    device_gaps: pl.DataFrame


@dataclass(frozen=True)
class Inputs:
    """What the idle-time analyses (:func:`gaps`, :func:`.steps.steps`) read from the
    events, read in one pass (:func:`inputs`).

    ``work``: device work of non-zero length: ``row, rank, track, device, name, start,
    end, launch`` (``device`` the row's ``device``, else its ``pid``; ``launch`` the start
    of the runtime call that launched it, null when unknown). ``copy``, ``held``,
    ``host``: per rank, ``rank, start, end``, the unions of the host-to-device copies; of
    copies and synchronisations; of copies, synchronisations and framework ops (each
    inside the next).
    """

    work: pl.DataFrame
    copy: pl.DataFrame
    held: pl.DataFrame
    host: pl.DataFrame


def inputs(lf: pl.LazyFrame) -> Inputs:
    """The rows of ``lf`` the idle-time analyses need, read in one pass (see
    :class:`Inputs`)."""
    end = pl.col(S.START_NS) + pl.col(S.DUR_NS)
    is_work = V.is_device_work() & (pl.col(S.DUR_NS) > 0)
    is_runtime = (pl.col(S.LAYER) == S.RUNTIME) & V.is_span()
    linked = pl.col(S.CORRELATION).is_not_null() | (pl.col(S.FLOW_IDS).list.len() > 0)
    frame = (
        lf.select(
            S.ROW, S.RANK, S.TRACK, S.START_NS, S.CORRELATION, S.MODEL_ID,
            pl.when(is_work | is_runtime).then(pl.col(S.FLOW_IDS)).alias(S.FLOW_IDS),
            pl.when(is_work).then(pl.col(S.NAME)).alias(S.NAME),
            pl.coalesce(pl.col(S.DEVICE_COL), pl.col(S.PID)).alias(S.DEVICE_COL),
            end=end,
            _work=is_work,
            _launcher=is_runtime & linked,
            _copy=V.is_copy() & (pl.col(S.DIRECTION) == V.H2D),
            _sync=V.is_sync(),
            _op=V.is_op(),
        )
        .filter(pl.any_horizontal("_work", "_launcher", "_copy", "_sync", "_op"))
        .collect(engine=I.ENGINE)
    )
    spans = frame.lazy().select(S.RANK, "_copy", "_sync", "_op", start=S.START_NS, end="end")
    if not frame.get_column("_work").any():  # no gap to explain: the unions stay empty
        spans = spans.clear()
    copy, held, host = pl.collect_all([
        I.union(spans.filter("_copy"), [S.RANK]),
        I.union(spans.filter(pl.col("_copy") | pl.col("_sync")), [S.RANK]),
        I.union(spans.filter(pl.col("_copy") | pl.col("_sync") | pl.col("_op")), [S.RANK]),
    ], engine=I.ENGINE)
    work = frame.filter("_work").select(
        S.ROW, S.RANK, S.TRACK, S.DEVICE_COL, S.NAME, S.CORRELATION, S.FLOW_IDS,
        S.MODEL_ID, start=S.START_NS, end="end",
    )
    launchers = frame.filter("_launcher").select(S.ROW, S.RANK, S.START_NS, S.CORRELATION,
                                                 S.FLOW_IDS, S.MODEL_ID)
    return Inputs(work=_with_launch(work, launchers), copy=copy, held=held, host=host)


def _with_launch(work: pl.DataFrame, launchers: pl.DataFrame) -> pl.DataFrame:
    """``work`` with ``launch``: the start of the runtime call that launched it, paired by
    the rules of :mod:`.launches`: the call of the work's ``correlation``, else the last
    call before it sharing a flow arrow (:func:`.launches.call_by_flow`)."""
    calls = launchers.lazy().rename({S.START_NS: "call_start_ns"})
    by_corr = call_of_correlation(calls).select(S.RANK, S.CORRELATION, launch="call_start_ns")
    work = work.join(by_corr.collect(engine=I.ENGINE), on=[S.RANK, S.CORRELATION], how="left")
    unmatched = work.filter(pl.col("launch").is_null() & (pl.col(S.FLOW_IDS).list.len() > 0))
    if unmatched.height:
        wanted = unmatched.lazy().select(
            S.RANK, S.MODEL_ID, _key=S.ROW, _flow=S.FLOW_IDS, device_start_ns="start",
        ).explode("_flow")
        flows = call_by_flow(wanted, calls).select(
            pl.col("_key").alias(S.ROW), _by_flow="call_start_ns").collect(engine=I.ENGINE)
        work = work.join(flows, on=S.ROW, how="left").with_columns(
            launch=pl.coalesce("launch", "_by_flow"))
    return work.select(S.ROW, S.RANK, S.TRACK, S.DEVICE_COL, S.NAME, "start", "end", "launch")


def gaps(lf: pl.LazyFrame, min_gap_ns: int = 0, read: Inputs | None = None) -> Gaps:
    """Idle time per device and per device track, and each gap with its cause (see the
    module docstring).

    ``min_gap_ns`` limits the listed gaps (and the ``gaps`` counts) to those lasting at
    least that long; ``idle_ns`` and the per-cause totals always include every gap.
    ``read``: what :func:`inputs` read from ``lf``, when the caller has it already.
    """
    if read is None:
        read = inputs(lf)
    names = read.work.group_by(*TRACK_KEYS).agg(
        pl.col(S.DEVICE_COL).first(),
        label=pl.col(S.TRACK).first().str.split(" / ").list.first(),
    )
    tracks, per_track = _table(read, TRACK_KEYS, min_gap_ns)
    tracks = tracks.join(names.select(*TRACK_KEYS, S.DEVICE_COL), on=TRACK_KEYS, how="left",
                         nulls_equal=True).select(S.RANK, S.TRACK, S.DEVICE_COL,
                                                  pl.exclude(S.RANK, S.TRACK, S.DEVICE_COL))
    devices, per_device = _table(read, DEVICE_KEYS, min_gap_ns)
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


def _table(read: Inputs, keys: Sequence[str], min_gap_ns: int
           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per ``keys`` group: ``keys..., start_ns, span_ns, busy_ns, idle_ns, gaps,
    <cause>_ns``; and its listed gaps, ``keys..., start_ns, dur_ns, cause, before,
    after``."""
    pieces, found = idle(read, keys)
    by_cause = found.group_by(*keys).agg(
        pl.col(f"{c}_cover").sum().alias(f"{c}_ns") for c in CAUSES
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


def idle(read: Inputs, by: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Busy pieces and gaps, grouping device work by ``by`` columns.

    ``by`` is ``(rank, track)`` for per-track gaps, ``(rank, device)`` per device,
    ``(rank,)`` to treat all of a rank's devices as one (a step is idle only when every
    track is). Returns ``pieces`` (``by..., start, end``: the busy union) and ``gaps``
    (``by..., start_ns, dur_ns, cause, before, after, _cut``, the time each cause
    explains, ``<cause>_cover``, adding up to ``dur_ns``, and ``_cut``: where launch
    latency may begin, the start of the launch of the work after the gap, clipped to it).
    """
    keys = list(by)
    pieces = I.union(read.work, keys, first=[S.NAME, "launch"], last=[S.NAME]).collect(
        engine=I.ENGINE)
    nxt = (lambda e: e.shift(-1).over(keys)) if keys else (lambda e: e.shift(-1))
    candidates = (
        pieces.lazy().with_columns(
            g_start=pl.col("end"),
            g_end=nxt(pl.col("start")),
            before=pl.col(f"_last_{S.NAME}"),
            after=nxt(pl.col(f"_first_{S.NAME}")),
            _launch=nxt(pl.col("_first_launch")),
        )
        .filter(pl.col("g_end").is_not_null() & (pl.col("g_end") > pl.col("g_start")))
        .select(*keys, "g_start", "g_end", "before", "after", "_launch")
        .with_columns(
            _cut=pl.min_horizontal(pl.col("g_end"),
                                   pl.col("_launch").fill_null(pl.col("g_end")))
            .clip(lower_bound=pl.col("g_start"))
        )
    )
    found = explain(read, candidates.collect(engine=I.ENGINE))
    known = [pl.col(f"{c}_cover") for c in CAUSES if c != UNKNOWN]
    best = pl.max_horizontal(known)
    cause: pl.Expr = pl.lit(UNKNOWN)
    for c in reversed(CAUSES[:-1]):  # built inside out: the first cause wins ties
        cause = pl.when(pl.col(f"{c}_cover") == best).then(pl.lit(c)).otherwise(cause)
    found = found.with_columns(
        start_ns=pl.col("g_start"),
        dur_ns=pl.col("g_end") - pl.col("g_start"),
        cause=pl.when(best <= 0).then(pl.lit(UNKNOWN)).otherwise(cause),
    ).drop("g_start", "g_end", "_launch")
    return pieces.select(*keys, "start", "end"), found


def explain(read: Inputs, stretches: pl.DataFrame) -> pl.DataFrame:
    """``stretches`` (``rank, g_start, g_end, _cut``: idle time, and where the launch of
    the work after it began, clipped to it) with the time each cause explains,
    ``<cause>_cover``, adding up to ``g_end - g_start``.

    Each instant goes to the first explanation that holds then (copy, sync, launch once
    issued, framework op), so one event nested in another (a copy inside an op) counts
    for the more specific: the rank's unions of the first k kinds, differenced.
    """
    on = [S.RANK]
    c0, c1 = I.before(read.copy, stretches, on, ["g_start", "g_end"])
    h0, h1, h_cut = I.before(read.held, stretches, on, ["g_start", "g_end", "_cut"])
    o0, o_cut = I.before(read.host, stretches, on, ["g_start", "_cut"])
    covers = {
        H2D_COPY: c1 - c0,
        SYNC: (h1 - h0) - (c1 - c0),
        LAUNCH: (stretches.get_column("g_end") - stretches.get_column("_cut"))
        - (h1 - h_cut),
        DISPATCH: (o_cut - o0) - (h_cut - h0),
    }
    known = covers[H2D_COPY] + covers[SYNC] + covers[LAUNCH] + covers[DISPATCH]
    covers[UNKNOWN] = stretches.get_column("g_end") - stretches.get_column("g_start") - known
    return stretches.with_columns(v.alias(f"{c}_cover") for c, v in covers.items())
