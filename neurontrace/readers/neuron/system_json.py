"""Neuron's host-side JSON: the legacy system profile and the runtime's live fetch.

``system_profile.json`` (``neuron-explorer view --output-format json``, end of support
after SDK 2.33): a top-level ``trace_event`` list, streamed a chunk at a time. Ids come
as numbers or strings (``"process_id": "1234"``); both are read as integers, and text
that is not a number is kept in ``pid_label``/``tid_label``. ``type`` 99999 is a
framework event, and so is an event without ``type`` whose ``group`` starts with
``framework`` (a newer example in the Profiler 2.0 guide; formats.md §3b); its ``group``
is then its category. ``nc_exec_running`` and the other hardware events (formats.md §5) are
device rows; everything else is runtime. Times are epoch ns.

Live fetch (``nrt_sys_trace_fetch_events``): ``{"events": [...]}`` with ``start`` and
``stop`` records of one execution as separate entries, paired by
``(nc_idx, tracking_id)``; their times are ``data.nc_timestamp_ns``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import shown
from neurontrace.readers import neuron as N
from neurontrace.readers.base import Events, Progress
from neurontrace.readers.jsonstream import ArrayStream

_DICTS = msgspec.json.Decoder(list[Any])

#: Fields that become columns; all others stay in ``args``.
_SYSTEM_USED = ("name", "timestamp", "duration", "type", "process_id", "thread_id",
                "instance_id", "lnc_idx", "size")
#: Fields read as text, and as integers.
_TEXTS = ("name", "instance_id", "group", "process_id", "thread_id")
_INTS = ("timestamp", "nc_start_timestamp_ns", "duration", "type", "lnc_idx", "nc_idx",
         "device_core_idx", "size")


def _text(v: Any) -> str | None:
    """``v`` as text (:func:`.json_text`), a float holding an integer as that integer."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else N.json_text(v)


def _inner(e: dict[str, Any], outer: str, key: str) -> Any:
    """``e[outer][key]`` where ``e[outer]`` is an object holding it, else None."""
    d = e.get(outer)
    return d.get(key) if isinstance(d, dict) else None


class SystemJsonReader:
    name = "neuron-system-json"
    description = "Neuron legacy system profile JSON (system_profile.json, trace_event list)"

    def sniff(self, path: Path, head: bytes) -> bool:
        return b'"trace_event"' in head

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        return Events.filled_by(self.name, lambda ev: self._batches(path, diag, progress, ev))

    def _batches(self, path: Path, diag: Diagnostics, progress: Progress | None,
                 ev: Events) -> Iterator[pa.RecordBatch]:
        total = path.stat().st_size
        stream = ArrayStream(path, b"trace_event")
        index = 0
        for chunk in stream.decoded(_DICTS.decode):
            values = chunk.value or []
            items = [e if isinstance(e, dict) else {"name": "", "value": e} for e in values]
            bad = sum(not isinstance(e, dict) for e in values)
            if bad:
                diag.warn("not_an_object", f"{shown(path)}: {bad} trace_event entries after event "
                          f"#{index} are not objects; kept as unnamed instants", bad)
            yield N.to_batch(system_frame(items, path, index, diag))
            index += len(items)
            if progress is not None:
                progress(min(stream.bytes_read, total), total)
        ev.trace = {"neuron": {"format": "system-profile-json", **stream.outer}}
        ev.clock = {"base_time_ns": 0, "host": "timestamp, epoch ns, exact",
                    "device": "nc_exec_running and other hardware events carry host "
                              "timestamps; nc_*_timestamp_ns kept in args"}


def system_frame(items: list[dict[str, Any]], path: Path, index: int,
                 diag: Diagnostics) -> pl.DataFrame:
    """One chunk of ``trace_event`` entries as event columns."""
    cols = {k: [_text(e.get(k)) for e in items] for k in (*_TEXTS, *_INTS)}
    cols["exec_id"] = [_text(e.get("exec_id", _inner(e, "args", "exec_id"))) for e in items]
    # args: each item less the fields used, as JSON; null where nothing is left
    cols[S.ARGS] = [N.json_text({k: v for k, v in e.items() if k not in _SYSTEM_USED} or None)
                    for e in items]
    df = pl.DataFrame(cols, schema=dict.fromkeys(cols, pl.String))
    nameless = df.get_column("name").null_count()
    if nameless:
        diag.warn("missing_name", f"{shown(path)}: {nameless} event(s) after #{index} "
                  "have no name; named ''", nameless)
    pid, pid_label = N.int_or_label(df.get_column("process_id"))
    tid, tid_label = N.int_or_label(df.get_column("thread_id"))
    df = df.with_columns(
        pl.col("name").fill_null(""), pl.col("type").alias("type_text"),
        *(pl.col(k).str.strip_chars().cast(pl.Int64, strict=False) for k in _INTS),
    ).with_columns(
        start=pl.coalesce("timestamp", "nc_start_timestamp_ns"),
        lnc=pl.coalesce("lnc_idx", "nc_idx"),
        core=pl.coalesce("device_core_idx", "nc_idx"),
    )
    missing = df.get_column("start").null_count()
    if missing:
        diag.warn("bad_ts", f"{shown(path)}: {missing} event(s) after #{index} have no usable "
                  "timestamp; placed at time 0", missing)
    framework = (pl.col("type") == N.FRAMEWORK_TYPE) | (
        pl.col("type_text").is_null()
        & pl.col("group").str.to_lowercase().str.starts_with("framework").fill_null(False))
    layer = (
        pl.when(framework).then(pl.lit(S.FRAMEWORK))
        .when(pl.col("name").is_in(list(N.HARDWARE_EVENTS))).then(pl.lit(S.DEVICE))
        .otherwise(pl.lit(S.RUNTIME))
    )
    return df.select(
        layer.alias(S.LAYER),
        pl.coalesce("type_text", "group").alias(S.CATEGORY),
        pl.col("name").alias(S.NAME),
        pl.when(pl.col("duration").is_not_null()).then(pl.lit(S.SPAN))
        .otherwise(pl.lit(S.INSTANT)).alias(S.KIND),
        pl.col("start").fill_null(0).alias(S.START_NS),
        pl.col("duration").fill_null(0).clip(0).alias(S.DUR_NS),
        pl.col("lnc").alias(S.DEVICE_COL),
        pl.col("size").alias(S.BYTES),
        N.execution_key(pl.col("lnc"), pl.col("exec_id")).alias(S.EXECUTION),
        pl.col("instance_id").alias(S.INSTANCE_ID),
        pl.col("device_core_idx").alias(S.DEVICE_CORE),  # device_core_idx: within the device
        pl.when(layer == S.DEVICE).then(
            N.device_track(pl.col("lnc"), pl.col("name"), pl.col("core"))
        ).alias(S.TRACK),
        pid.alias(S.PID), tid.alias(S.TID), pid_label.alias(S.PID_LABEL),
        tid_label.alias(S.TID_LABEL), S.ARGS,
    )


class LiveFetchReader:
    name = "neuron-live-json"
    description = "Neuron runtime live fetch JSON (nrt_sys_trace_fetch_events: events list)"

    def sniff(self, path: Path, head: bytes) -> bool:
        return b'"events"' in head and (b'"tracking_id"' in head or b'"event_type"' in head)

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        return Events.filled_by(self.name, lambda ev: self._batches(path, diag, ev))

    def _batches(self, path: Path, diag: Diagnostics, ev: Events) -> Iterator[pa.RecordBatch]:
        stream = ArrayStream(path, b"events")
        records = [e for chunk in stream.decoded(_DICTS.decode) for e in chunk.value or []
                   if isinstance(e, dict)]
        yield N.to_batch(live_frame(records, path, diag))
        ev.trace = {"neuron": {"format": "live-fetch-json", **stream.outer}}
        ev.clock = {"base_time_ns": 0, "method": "none",
                    "device": "data.nc_timestamp_ns as recorded (NeuronCore clock); not "
                              "placed on host time"}


#: Live-fetch record fields read, by the column they become (and in ``data``).
_LIVE_FIELDS = {"event_type": "event_type", "phase": "phase", "tracking_id": "tracking_id",
                "nc": "nc_idx"}
_LIVE_DATA = {"t": "nc_timestamp_ns", "exec_id": "exec_id", "core": "device_core_idx"}


def live_frame(records: list[dict[str, Any]], path: Path, diag: Diagnostics) -> pl.DataFrame:
    """Start and stop records paired by ``(nc_idx, tracking_id)`` into spans: a start and
    the first stop of its key make one span; a start without one, the first stop of a
    key without a start and any other record are instants."""
    cols = {c: [_text(r.get(k)) for r in records] for c, k in _LIVE_FIELDS.items()}
    cols |= {c: [_text(_inner(r, "data", k)) for r in records] for c, k in _LIVE_DATA.items()}
    cols[S.ARGS] = [N.json_text(r) for r in records]
    df = pl.DataFrame(cols, schema=dict.fromkeys(cols, pl.String)).with_row_index("_i") \
        .with_columns(pl.col("nc", "t", "core").cast(pl.Int64, strict=False))
    key = ["nc", "tracking_id"]  # a null key is a key too
    phase = pl.col("phase")

    def first_stop(col: str) -> pl.Expr:
        """``col`` of the first stop record of the row's key."""
        return pl.col(col).filter(phase == "stop").first().over(key)

    df = df.with_columns(_stop=first_stop("t"), _stop_i=first_stop("_i"),
                         _stop_args=first_stop(S.ARGS), _started=(phase == "start").any().over(key))
    start = (phase == "start").fill_null(False)
    lone_stop = (phase == "stop") & ~pl.col("_started") & (pl.col("_i") == pl.col("_stop_i"))
    lone_start = df.filter(start & pl.col("_stop").is_null()).height
    lone_stops = df.filter(lone_stop).height
    if lone_start:
        diag.warn("unpaired_start", f"{shown(path)}: {lone_start} start record(s) without a stop "
                  "(same nc_idx and tracking_id); kept as instants", lone_start)
    if lone_stops:
        diag.warn("unpaired_stop", f"{shown(path)}: {lone_stops} stop record(s) without a "
                  "start; kept as instants", lone_stops)
    return df.filter((phase != "stop").fill_null(True) | lone_stop).select(
        pl.lit(S.DEVICE).alias(S.LAYER),
        pl.lit("live_fetch").alias(S.CATEGORY),
        pl.col("event_type").fill_null("").alias(S.NAME),
        pl.when(start & pl.col("_stop").is_not_null()).then(pl.lit(S.SPAN))
        .otherwise(pl.lit(S.INSTANT)).alias(S.KIND),
        pl.col("t").fill_null(0).alias(S.START_NS),
        pl.when(start).then((pl.col("_stop") - pl.col("t")).clip(0)).fill_null(0)
        .alias(S.DUR_NS),
        pl.col("nc").alias(S.DEVICE_COL),
        pl.col("core").alias(S.DEVICE_CORE),
        N.device_track(pl.col("nc"), pl.col("event_type").fill_null("event"),
                       pl.col("core")).alias(S.TRACK),
        N.execution_key(pl.col("nc"), pl.col("exec_id")).alias(S.EXECUTION),
        pl.when(start & pl.col("_stop_args").is_not_null()).then(pl.concat_str(
            pl.lit('{"start":'), pl.col(S.ARGS), pl.lit(',"stop":'), pl.col("_stop_args"),
            pl.lit("}"))).otherwise(pl.col(S.ARGS)).alias(S.ARGS),
    )
