"""One chunk of Kineto events as Arrow columns: layers, exact times, ids, args, links."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, is_
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers.base import FLOWS_SCHEMA
from neurontrace.readers.jsonrepair import is_utf8
from neurontrace.readers.kineto.events import ANY_JSON, Event
from neurontrace.readers.kineto.roles import arg_text, classify, layer_of
from neurontrace.readers.units import I64_MAX, I64_MIN, microseconds_to_ns

KIND_OF_PHASE = {"X": S.SPAN, "i": S.INSTANT, "I": S.INSTANT, "C": S.COUNTER}
FLOW_PHASES = {"s", "t", "f"}

BATCH_SCHEMA = S.reader_schema(
    S.LAYER, S.CATEGORY, S.NAME, S.KIND, S.ROLE, S.DIRECTION, S.START_NS, S.DUR_NS,
    S.PID, S.TID, S.PID_LABEL, S.TID_LABEL, S.DEVICE_COL, S.STREAM, S.EXTERNAL_ID,
    S.CORRELATION, S.BYTES, S.ARGS,
)


class Metadata:
    """Track names from ``M`` events: a thread's last name; a process's last label other
    than ``CPU`` (a device's label, "GPU 0", names its lanes best), else its first name.
    """

    def __init__(self) -> None:
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self._first_names: dict[Any, str] = {}
        self._device_labels: dict[Any, str] = {}
        #: The earliest start and latest end of a row so far (ns, before any base time).
        self.times: tuple[int, int] | None = None

    def saw(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Note the start and end times of ``batch``'s rows; returns ``batch``."""
        start = batch.column(S.START_NS)
        low = pc.min(start)
        if low.is_valid:
            end = pc.add(start, batch.column(S.DUR_NS))  # cannot wrap: see _row_batch
            self.times = _widened(self.times, (low.as_py(), pc.max(end).as_py()))
        return batch

    @property
    def process_names(self) -> dict[Any, str]:
        return {**self._first_names, **self._device_labels}

    def merge(self, later: Metadata) -> None:
        """Add the names of a later part of the same trace."""
        self.thread_names.update(later.thread_names)
        for pid, name in later._first_names.items():
            self._first_names.setdefault(pid, name)
        self._device_labels.update(later._device_labels)
        if later.times is not None:
            self.times = _widened(self.times, later.times)

    def add(self, ev: Event) -> None:
        try:
            args = ANY_JSON.decode(ev.args)
        except (msgspec.DecodeError, RecursionError):  # no args, or not valid JSON
            return
        if not isinstance(args, dict):
            return
        if ev.name == "thread_name" and isinstance(args.get("name"), str):
            self.thread_names[(ev.pid, ev.tid)] = args["name"].strip()
        elif ev.name == "process_name" and isinstance(args.get("name"), str):
            self._first_names.setdefault(ev.pid, args["name"].strip())
        elif ev.name == "process_labels" and isinstance(args.get("labels"), str):
            label = args["labels"].strip()
            if label != "CPU":
                self._device_labels[ev.pid] = label


def _widened(a: tuple[int, int] | None, b: tuple[int, int]) -> tuple[int, int]:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]))


_NOT_ROWS = frozenset({"M", *FLOW_PHASES})
# Field getters (map over a list of structs runs in C, a comprehension does not).
_PH, _NAME, _CAT, _PID, _TID, _TS, _DUR, _ARGS = (
    attrgetter(f) for f in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args"))


def chunk_columns(
    events: list[Event], at: int, path: Path, meta: Metadata, diag: Diagnostics
) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
    """Rows and flows of one chunk; ``at`` is its byte offset (messages name events as
    "#k after byte <at>"). Every phase but metadata and flows is a row; an unknown one
    is kept as an instant."""
    rows = [e for e in events if e.ph not in _NOT_ROWS]

    def where(row: int) -> str:
        """Names a row's event in messages ("#k after byte N"), found only when needed."""
        k = [i for i, e in enumerate(events) if e.ph not in _NOT_ROWS][row]
        return f"#{k} after byte {at}"

    others = [e for e in events if e.ph in _NOT_ROWS]
    for e in others:
        if e.ph == "M":
            meta.add(e)
    flows = [e for e in others if e.ph in FLOW_PHASES]
    return meta.saw(_row_batch(rows, where, path, diag)), _flow_batch(flows, path, diag)


#: Names a row's event in messages, by its index among the chunk's rows.
_Where = Callable[[int], str]


def _text(values: list[Any], what: str, path: Path, diag: Diagnostics) -> pa.Array:
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        diag.warn("non_string", f"{path}: some {what} values are not strings; kept as JSON")
        # (json, not orjson: integers over 64 bits stay exact)
        return pa.array([v if isinstance(v, str) or v is None
                         else json.dumps(v, ensure_ascii=False, separators=(",", ":"))
                         for v in values], pa.string())


def _ids(values: list[Any], what: str, path: Path, diag: Diagnostics) -> tuple[pa.Array, pa.Array]:
    """Numeric ids to int64 (null otherwise) plus the original text of the others."""
    try:
        return pa.array(values, pa.int64()), pa.nulls(len(values), pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    # The values that are not integers, found in C (a chunk holds a few, such as the
    # "Spans" lanes): a loop over every value in Python took a third of a CUDA
    # trace's column building.
    odd = np.flatnonzero(~np.fromiter(map(is_, map(type, values), repeat(int)), bool,
                                      len(values)))
    nums = list(values)
    labels: list[str | None] = [None] * len(values)
    for i in odd.tolist():
        v = values[i]
        nums[i] = None
        labels[i] = None if v is None else str(v)
    try:
        return pa.array(nums, pa.int64()), pa.array(labels, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    wide = [i for i, v in enumerate(nums) if v is not None and not I64_MIN <= v <= I64_MAX]
    for i in wide:  # integers beyond 64 bits: kept as text
        labels[i] = str(nums[i])
        nums[i] = None
    diag.warn("wide_integer", f"{path}: {len(wide)} {what} value(s) exceed 64 bits; kept as text")
    return pa.array(nums, pa.int64()), pa.array(labels, pa.string())


_ZERO = msgspec.Raw(b"0.000")

#: Instants Kineto itself writes without a category in every trace: the start of each
#: profiling iteration ("Iteration Start: PyTorch Profiler", "Iteration Start:
#: __cupti_profiler__", ...) and the end of the recorded window.
KINETO_MARKER_PREFIX = "Iteration Start: "
KINETO_MARKERS = frozenset({"Record Window End"})


def _kineto_marker(phase: str, name: Any) -> bool:
    """Whether an event is one of Kineto's own uncategorised instants (its category
    stays null without a warning; any other event without a category is warned)."""
    return phase in ("i", "I") and isinstance(name, str) and (
        name in KINETO_MARKERS or name.startswith(KINETO_MARKER_PREFIX))


def _row_batch(rows: list[Event], where: _Where, path: Path, diag: Diagnostics
               ) -> pa.RecordBatch:
    phases = list(map(_PH, rows))
    kind = pa.array(list(map(KIND_OF_PHASE.get, phases)), pa.string())
    if _flag(pc.is_null(kind), diag, "unknown_phase", lambda i: (
            f"{path}: event {where(i)} {rows[i].name!r} has phase {phases[i]!r}; "
            "kept as an instant")):
        kind = pc.fill_null(kind, S.INSTANT)
    names = list(map(_NAME, rows))
    if None in names:
        missing = sum(v is None for v in names)
        diag.warn("missing_name", f"{path}: {missing} event(s) without a name; named ''")
        names = ["" if v is None else v for v in names]
    name = _text(names, "name", path, diag)
    cats = list(map(_CAT, rows))
    category = _text(cats, "cat", path, diag)
    if category.null_count:
        odd = [i for i, c in enumerate(cats)
               if c is None and not _kineto_marker(phases[i], names[i])]
        if odd:
            diag.warn(
                "missing_cat",
                f"{path}: {len(odd)} event(s) without a category (e.g. event "
                f"{where(odd[0])} {names[odd[0]]!r}); category left null",
                len(odd),
            )
    layer = _mapped(category, layer_of, S.FRAMEWORK)
    pid, pid_label = _ids(list(map(_PID, rows)), "pid", path, diag)
    tid, tid_label = _ids(list(map(_TID, rows)), "tid", path, diag)

    start, rounded = microseconds_to_ns(list(map(_TS, rows)))
    if _flag(pc.is_null(start), diag, "bad_ts", lambda i: (
            f"{path}: event {where(i)} {names[i]!r} has ts {bytes(rows[i].ts)[:40]!r}; "
            "placed at time 0")):
        start = pc.fill_null(start, 0)
    if rounded:
        diag.warn(
            "sub_ns_time", f"{path}: {len(rounded)} ts value(s) rounded to 1 ns", len(rounded)
        )
    # Only spans have durations; the others' dur (usually absent, whatever the file
    # says) reads as zero: a null is a span's.
    durs = list(map(_DUR, rows))
    if "X" not in phases or len(set(phases)) > 1:
        durs = [d if ph == "X" else _ZERO for d, ph in zip(durs, phases, strict=True)]
    dur, rounded = microseconds_to_ns(durs)
    _flag(pc.is_null(dur), diag, "missing_dur", lambda i: (
        f"{path}: event {where(i)} {names[i]!r} (ph X) has no usable dur; duration 0"))
    dur = pc.fill_null(dur, 0)
    negative = pc.less(dur, 0)
    if _flag(negative, diag, "negative_dur", lambda i: (
            f"{path}: event {where(i)} {names[i]!r} has dur "
            f"{bytes(rows[i].dur).decode(errors='replace')}; duration set to 0")):
        dur = pc.if_else(negative, 0, dur)
    # A span that would end past the int64 range of nanoseconds ends there.
    over = pc.and_(pc.greater(start, 0), pc.greater(dur, pc.subtract(I64_MAX, start)))
    if _flag(over, diag, "end_out_of_range", lambda i: (
            f"{path}: event {where(i)} {names[i]!r} would end past the 64-bit range of "
            "nanoseconds; its duration is cut to end there")):
        dur = pc.if_else(over, pc.subtract(I64_MAX, start), dur)

    args, links = _args(list(map(_ARGS, rows)), where, path, diag)
    roles = classify(pl.DataFrame({S.LAYER: layer, S.CATEGORY: category, S.NAME: name,
                                   S.KIND: kind, S.ARGS: args}))
    cols = {
        S.LAYER: layer,
        S.CATEGORY: category,
        S.NAME: name,
        S.KIND: kind,
        S.ROLE: roles.get_column(S.ROLE).to_arrow(),
        S.DIRECTION: roles.get_column(S.DIRECTION).to_arrow(),
        S.START_NS: start,
        S.DUR_NS: dur,
        S.PID: pid,
        S.TID: tid,
        S.PID_LABEL: pid_label,
        S.TID_LABEL: tid_label,
        **links,
        S.ARGS: args,
    }
    return pa.RecordBatch.from_pydict(cols, schema=BATCH_SCHEMA)


def _flag(mask: pa.Array, diag: Diagnostics, code: str, message: Callable[[int], str]
          ) -> bool:
    """Whether ``mask`` marks any row; when it does, warns ``code`` with ``message`` of
    the first such row, counting them all."""
    n = pc.sum(mask).as_py() or 0
    if n:
        diag.warn(code, message(pc.index(mask, True).as_py()), n)
    return n > 0


def _mapped(values: pa.Array, fn: Callable[[str], str], missing: str) -> pa.Array:
    """``fn`` of each value, computed once per distinct value (there are few)."""
    enc = values.dictionary_encode()
    table = pa.array([fn(v) for v in enc.dictionary.to_pylist()] + [missing], pa.string())
    return table.take(pc.fill_null(enc.indices, len(table) - 1))


def _args(
    raws: list[msgspec.Raw], where: _Where, path: Path, diag: Diagnostics
) -> tuple[pa.Array, dict[str, pa.Array]]:
    """The ``args`` text of each row, unchanged, and the link columns read from it.

    The raw JSON texts are laid end to end as one Arrow string buffer (offsets from
    their lengths: no copy per value, no parsing); UTF-8 is validated in C.
    """
    n = len(raws)
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    joined = b"".join(raws)
    absent = lengths == 0
    validity = pa.array(~absent).buffers()[1] if absent.any() else None
    args = pa.LargeStringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(joined), validity, int(absent.sum())
    )
    try:
        args.validate(full=True)
    except pa.ArrowInvalid:
        args = _replace_invalid_utf8(raws, where, path, diag)
    args = args.cast(pa.string())
    text = pl.DataFrame({"a": pl.Series(args)})
    keys = [k for _, ks in _LINK_KEYS for k in ks]
    # A regex pass per key the chunk holds (a literal search says which: a CPU trace has
    # no "correlation" or "stream"; the others are null throughout): measured, without
    # it the args took a third longer on the CPU trace (the regex's own literal-first
    # scan does not skip an absent key as fast).
    held = text.select(
        pl.col("a").str.contains(f'"{k}"', literal=True).any().alias(k) for k in keys
    ).row(0)
    found = text.with_columns(
        arg_text(pl.col("a"), k, _INTEGER, " bytes" if k in _BYTE_KEYS else "").alias(k)
        if present
        else pl.lit(None, pl.String).alias(k)
        for k, present in zip(keys, held, strict=True)
    ).drop("a")
    found = found.select(_as_int64(pl.col(k), k) for k in keys)
    merged = found.select(pl.coalesce(list(ks)).alias(col) for col, ks in _LINK_KEYS)
    return args, {c: merged.get_column(c).to_arrow() for c in merged.columns}


def _replace_invalid_utf8(raws: list[msgspec.Raw], where: _Where, path: Path,
                          diag: Diagnostics) -> pa.Array:
    texts = [bytes(r).decode("utf-8", errors="replace") if len(r) else None for r in raws]
    bad = [i for i, r in enumerate(raws) if len(r) and not is_utf8(r)]
    diag.warn(
        "invalid_utf8",
        f"{path}: invalid UTF-8 in the args of event {where(bad[0])}; replaced with U+FFFD",
        len(bad),
    )
    return pa.array(texts, pa.large_string())


#: Column -> the args keys it is read from, first present wins.
_LINK_KEYS = (
    (S.DEVICE_COL, ("device",)),
    (S.STREAM, ("stream",)),
    (S.EXTERNAL_ID, ("External id",)),
    (S.CORRELATION, ("correlation",)),
    (S.BYTES, ("bytes", "Bytes", "size", "mem size")),
)
#: The byte-count keys, whose value may also be text with a unit (MTIA's
#: ``"mem size": "14139908 bytes"``).
_BYTE_KEYS = frozenset(dict(_LINK_KEYS)[S.BYTES])


#: An integer-valued ``args`` key's value: Kineto writes these as numbers, and some
#: backends as strings (``"0x0"``, ``"2560"``); a byte count may end in `` bytes``.
_INTEGER = "-?[0-9]+|0[xX][0-9a-fA-F]+"


def _as_int64(value: pl.Expr, name: str) -> pl.Expr:
    """Decimal or ``0x`` hex text to Int64; values beyond 64 bits are null (``args`` keeps
    them exactly)."""
    hexa = value.str.slice(0, 2).str.to_lowercase() == "0x"
    return (
        pl.when(hexa)
        .then(value.str.slice(2).str.to_integer(base=16, strict=False))
        .otherwise(value.str.to_integer(strict=False))
        .alias(name)
    )


def _flow_batch(flows: list[Event], path: Path, diag: Diagnostics) -> pa.RecordBatch | None:
    if not flows:
        return None
    flow_id = pa.array([f"{e.cat if isinstance(e.cat, str) else ''}:{e.id}" for e in flows],
                       pa.string())
    pid, _ = _ids(list(map(_PID, flows)), "pid", path, diag)
    tid, _ = _ids(list(map(_TID, flows)), "tid", path, diag)
    ts, _ = microseconds_to_ns(list(map(_TS, flows)))
    return pa.RecordBatch.from_pydict(
        {
            "flow_id": flow_id,
            "phase": pa.array(list(map(_PH, flows)), pa.string()),
            "pid": pid,
            "tid": tid,
            "ts_ns": ts,
            "enclosing": pa.array([e.bp == "e" for e in flows], pa.bool_()),
        },
        schema=FLOWS_SCHEMA,
    )
