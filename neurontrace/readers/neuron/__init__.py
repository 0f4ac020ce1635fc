"""Vocabulary shared by the Neuron readers: layers, tracks, executions, the batch shape.

Every Neuron reader (Explorer Parquet, legacy JSON, live fetch, run folders) builds a
Polars frame per chunk of events and hands it to :func:`to_batch`, so all of them
produce the same columns and name tracks and executions the same way::

    layer    track                          execution
    device   nc 0 / tensor                  nc0:exec7   (Instruction rows of execution 7)
    device   nc 0 / pcore 1 / tensor        nc0:exec7   (physical core 0/1 of logical core 0)
    device   nc 0 / nc_exec_running         nc0:exec7
    device   nc 1 / device core 2 / nc_exec_running     (Explorer system rows: the physical
                                                         core's index within the device)
    runtime  (derived: thread <tid>)        null

Host rows (framework and runtime) get no track here: the assembler names them from
``pid``/``tid`` exactly as it names a Kineto trace's threads, so that a runtime call
and the framework op it runs inside share a lane and nest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa

from neurontrace import schema as S
from neurontrace.readers.units import I64_MAX, I64_MIN

EXEC_EVENT = "nc_exec_running"
SYNC_EVENT = "timestamp_sync_point"

# -- roles (formats.md section 5) ---------------------------------------------------------
#: Hardware events that occupy a NeuronCore (an execution, a collective running).
COMPUTE_EVENTS = (EXEC_EVENT, "cc_running")
#: Hardware events that are waits: a collective waiting for its peers.
WAIT_EVENTS = ("cc_exec_barrier",)
#: Hardware events that mark a moment or a condition rather than occupy the NeuronCore:
#: clock sync points, notifications, errors, model switches.
MARKER_EVENTS = (SYNC_EVENT, "hw_notify", "numerical_err", "nrt_model_switch")
#: System-trace events that happen on the device (documented vocabulary, formats.md §5):
#: the ones above.
HARDWARE_EVENTS = frozenset(COMPUTE_EVENTS + WAIT_EVENTS + MARKER_EVENTS)
#: Device tables whose rows are DMA transfers (Explorer ``DmaPacket``, device JSON
#: ``dma``), and ones that only summarise busy time (``ActiveTime``).
TRANSFER_TABLES = ("DmaPacket", "dma")
SUMMARY_TABLES = ("ActiveTime",)
#: Runtime calls that load a compiled model (a NEFF) onto NeuronCores: the Neuron
#: runtime API's ``nrt_load`` and ``nrt_load_collectives`` (``nrt.h``).
LOAD_CALLS = ("nrt_load", "nrt_load_collectives")
#: Runtime calls where the host blocks on the device.
SYNC_CALLS = r"(?i)^kbl_exec_wait$|^nrt_.*(sync|wait)"
#: Runtime events that move a tensor between host and device.
COPY_DIRECTIONS: dict[str, str] = {
    **dict.fromkeys(("nrt_tensor_write", "tensor_write", "dmem_buf_copyin"), S.H2D),
    **dict.fromkeys(("nrt_tensor_read", "tensor_read", "dmem_buf_copyout"), S.D2H),
}

#: Legacy JSON ``type`` of a framework event (11 is a runtime API event).
FRAMEWORK_TYPE = 99999

#: A time at or after this many ns is taken as epoch-based (1970 + 11.6 days); device
#: timelines relative to a profile's start are far below it.
EPOCH_MIN_NS = 10**15

BATCH_SCHEMA = S.reader_schema(
    S.LAYER, S.CATEGORY, S.NAME, S.KIND, S.ROLE, S.DIRECTION, S.START_NS, S.DUR_NS,
    S.PID, S.TID, S.PID_LABEL, S.TID_LABEL, S.TRACK, S.DEVICE_COL, S.STREAM, S.BYTES, S.FLOW_IDS,
    S.EXECUTION, S.INSTANCE_ID, S.MODEL_ID, S.DEVICE_CORE, S.PCORE, S.ARGS,
)

#: The Polars type of each column (int64, text, lists of text).
_POLARS_TYPES: dict[str, pl.DataType] = dict(pl.DataFrame(BATCH_SCHEMA.empty_table()).schema)

#: Prefix of flow ids from Neuron sources (``flow_ids`` holds ``<category>:<id>``).
FLOW_PREFIX = "neuron:"


def role(layer: pl.Expr, category: pl.Expr, name: pl.Expr, kind: pl.Expr) -> pl.Expr:
    """What a Neuron row is (``schema.ROLES``): framework rows are operators (a
    ``ProfilerStep#N`` an annotation); runtime rows are calls, ``kbl_exec_wait`` and
    ``nrt_*`` sync/wait calls synchronisations, tensor reads and writes transfers,
    ``nrt_load`` / ``nrt_load_collectives`` (a NEFF loaded) loads; on
    the device, executions and instructions are compute, DMA rows and
    ``dmem_buf_copy*`` transfers, barriers waits, markers and ``ActiveTime`` summaries
    other."""
    cat = category.fill_null("")
    device = (
        pl.when(name.is_in(COMPUTE_EVENTS)).then(pl.lit(S.COMPUTE))
        .when(name.is_in(WAIT_EVENTS)).then(pl.lit(S.WAIT))
        .when(name.is_in(MARKER_EVENTS) | cat.is_in(SUMMARY_TABLES)).then(pl.lit(S.OTHER))
        .when(cat.is_in(TRANSFER_TABLES) | name.is_in(list(COPY_DIRECTIONS)))
        .then(pl.lit(S.TRANSFER))
        .otherwise(pl.lit(S.COMPUTE))
    )
    return (
        pl.when(kind == S.COUNTER).then(pl.lit(S.OTHER))
        .when(layer == S.DEVICE).then(device)
        .when(layer == S.RUNTIME).then(
            pl.when(name.str.contains(SYNC_CALLS)).then(pl.lit(S.SYNC))
            .when(name.is_in(list(COPY_DIRECTIONS))).then(pl.lit(S.TRANSFER))
            .when(name.is_in(LOAD_CALLS)).then(pl.lit(S.LOAD))
            .otherwise(pl.lit(S.RUNTIME_CALL)))
        .when(name.str.contains(S.STEP_PATTERN)).then(pl.lit(S.ANNOTATION))
        .otherwise(pl.lit(S.OPERATOR))
    )


def direction(name: pl.Expr) -> pl.Expr:
    """``h2d`` / ``d2h`` of the runtime and device events that move a tensor; DMA queues
    say no direction in a form documented enough to read (null)."""
    return name.replace_strict(COPY_DIRECTIONS, default=None, return_dtype=pl.String)


def to_batch(df: pl.DataFrame) -> pa.RecordBatch:
    """A frame holding any subset of :data:`BATCH_SCHEMA`'s columns (``role`` and
    ``direction`` not among them), as a batch of it, its rows classified."""
    table = df.select(
        pl.col(name).cast(t) if name in df.columns else pl.lit(None, t).alias(name)
        for name, t in _POLARS_TYPES.items()
    ).with_columns(
        role(pl.col(S.LAYER), pl.col(S.CATEGORY), pl.col(S.NAME).fill_null(""), pl.col(S.KIND))
        .alias(S.ROLE),
        direction(pl.col(S.NAME)).alias(S.DIRECTION),
    ).to_arrow().cast(BATCH_SCHEMA)
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns],
                                      schema=BATCH_SCHEMA)


def engine(name: pl.Expr) -> pl.Expr:
    """Engine names as one spelling: ``Tensor``, ``tensor`` -> ``tensor``."""
    return name.str.strip_chars().str.to_lowercase()


def device_track(nc: pl.Expr, lane: pl.Expr, pcore: pl.Expr,
                 core_label: str = "pcore") -> pl.Expr:
    """``nc 0 / tensor``; with a physical core ``nc 0 / pcore 1 / tensor``. ``nc`` is the
    logical NeuronCore; ``core_label`` says what ``pcore`` counts: ``pcore`` (0 or 1
    within the logical core, Explorer's device tables) or ``device core`` (the physical
    core within the device, Explorer's ``SystemProfileEvents.pcore_idx``)."""
    core = pl.concat_str(pl.lit(f"{core_label} "), pcore.cast(pl.String), pl.lit(" / "))
    return pl.concat_str(pl.lit("nc "), nc.cast(pl.String).fill_null("?"), pl.lit(" / "),
                         core.fill_null(""), lane)  # core is null where pcore is


def device_spans(df: pl.DataFrame, table: str, name: pl.Expr, nc: pl.Expr, lane: pl.Expr,
                 *more: pl.Expr | pl.Series | str,
                 pcore: pl.Expr) -> pl.DataFrame:
    """The rows of the device table ``table`` as spans called ``name`` on the track
    ``lane`` of NeuronCore ``nc`` (and physical core ``pcore``: :func:`device_track`),
    with the columns ``more``."""
    return df.select(
        pl.lit(S.DEVICE).alias(S.LAYER),
        pl.lit(table).alias(S.CATEGORY),
        name.alias(S.NAME),
        pl.lit(S.SPAN).alias(S.KIND),
        nc.alias(S.DEVICE_COL),
        device_track(nc, lane, pcore).alias(S.TRACK),
        *more,
    )


def execution_key(nc: pl.Expr, exec_id: pl.Expr, model: pl.Expr | None = None) -> pl.Expr:
    """``nc0:exec7``: one execution of a NEFF on a logical NeuronCore. With LNC=2 the
    rows of both physical cores carry the same key. With ``model`` (where it is not
    null) ``nc0:model7:execf1``: flow ids are small per-model counters, so two NEFFs on
    one core can reuse one and only (model, flow) names an execution."""
    model_part = pl.lit("") if model is None else pl.concat_str(  # null where model is null
        pl.lit("model"), model.cast(pl.String), pl.lit(":")).fill_null("")
    return pl.concat_str(pl.lit("nc"), nc.cast(pl.String).fill_null("?"), pl.lit(":"),
                         model_part, pl.lit("exec"), exec_id.cast(pl.String))  # null without id


def args_json(df: pl.DataFrame, columns: Iterable[str],
              raw_json: str | None = None) -> pl.Series:
    """The given columns as one JSON object per row (nulls kept as ``null``).

    ``raw_json`` names a column already holding JSON text (Explorer's
    ``extra_attributes_json``); it is embedded unchanged under its own key.
    """
    cols = [c for c in columns if c in df.columns and c != raw_json]
    body = (pl.struct(cols).struct.json_encode() if cols
            else pl.repeat("{}", pl.len(), dtype=pl.String))
    if raw_json is not None and raw_json in df.columns:
        raw = pl.col(raw_json).cast(pl.String)
        body = pl.when(raw.is_null() | (raw.str.strip_chars() == "")).then(body).otherwise(
            pl.concat_str(pl.lit('{"' + raw_json + '":'), raw,
                          pl.when(body == "{}").then(pl.lit("}"))
                          .otherwise(pl.concat_str(pl.lit(","), body.str.slice(1)))))
    return df.select(body.alias(S.ARGS)).to_series()


def int_text(text: pl.Expr) -> pl.Expr:
    """Text read as int64: integer text exactly, decimals through a float (rounded); null
    where it is no number or one out of int64's range (``abc``, ``1e400``, ``2**70``)."""
    c = text.str.strip_chars()
    return pl.coalesce(c.cast(pl.Int64, strict=False),
                       c.cast(pl.Float64, strict=False).round().cast(pl.Int64, strict=False))


def json_text(v: Any) -> str | None:
    """A decoded JSON value as text: a string as it is, anything else as its JSON (None
    stays None)."""
    return v if v is None or isinstance(v, str) else msgspec.json.encode(v).decode()


def int_or_label(values: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Ids that may be numbers or text (``"1234"``, ``"Spans"``): int64 where the value
    is an integer (text digits included), and the original text where it is not."""
    text = values.cast(pl.String)
    num = text.str.strip_chars().cast(pl.Int64, strict=False)
    return num, text.zip_with(num.is_null(), pl.Series([None], dtype=pl.String))


_INT_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")


def int_value(v: Any) -> int | None:
    """A value read from a table row (a Python object) as an int64, as Polars' lenient
    cast reads it: an int, a finite float or decimal (truncated), text of ASCII digits;
    None for anything else (a bool, a list, ``"abc"``, ``1e30``)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal, str)) \
            or isinstance(v, str) and not _INT_TEXT.fullmatch(v):
        return None
    try:
        n = int(v)  # a float or decimal truncated; infinities and NaN raise
    except (ValueError, OverflowError):
        return None
    return n if I64_MIN <= n <= I64_MAX else None


def numeric_ids(name: str) -> list[str]:
    """The digit runs of a file name, longest first: how NEFF and NTFF files pair up."""
    return sorted(re.findall(r"\d+", name), key=len, reverse=True)


def nc_from_name(name: str) -> int | None:
    """The NeuronCore a device capture belongs to, from ``_vnc_3`` or ``nc_3``."""
    m = re.search(r"(?:^|_)v?nc_([0-9]{1,9})(?![0-9])", name)
    return int(m.group(1)) if m else None
