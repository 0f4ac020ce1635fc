"""PyTorch profiler traces (Kineto Chrome-trace JSON, ``.json`` / ``.json.gz``).

The file is streamed a chunk of events at a time (see :mod:`.jsonstream`) and decoded
with msgspec into small structs whose ``ts``, ``dur`` and ``args`` stay raw text: times
are converted exactly from that text (:mod:`neurontrace.units`) and ``args`` is kept as
JSON text, so nothing the profiler wrote is lost or rounded. The few ``args`` keys that
link layers (``External id``, ``correlation``, ``device``, ``stream``, byte counts) are
decoded a second time into typed columns.
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
from neurontrace.readers.base import FLOWS_SCHEMA, Events, Progress, rank_from_name
from neurontrace.readers.jsonstream import ArrayStream, Decoded
from neurontrace.units import decimal_text_to_ns

#: Kineto category -> layer. Unknown categories are framework events.
LAYER_OF_CATEGORY: dict[str, str] = {
    "kernel": S.DEVICE,
    "gpu_memcpy": S.DEVICE,
    "gpu_memset": S.DEVICE,
    "gpu_user_annotation": S.DEVICE,
    "cuda_sync": S.DEVICE,
    "cuda_profiler_range": S.DEVICE,
    "mtia_ccp_events": S.DEVICE,
    "cuda_runtime": S.RUNTIME,
    "cuda_driver": S.RUNTIME,
    "privateuse1_runtime": S.RUNTIME,
    "privateuse1_driver": S.RUNTIME,
    "mtia_runtime": S.RUNTIME,
}
_RUNTIME_PREFIXES = ("privateuse1_", "cuda_", "hip_", "xpu_", "mtia_")

KIND_OF_PHASE = {"X": S.SPAN, "i": S.INSTANT, "I": S.INSTANT, "C": S.COUNTER}
FLOW_PHASES = {"s", "t", "f"}


class Event(msgspec.Struct):
    ph: str = ""
    name: Any = None
    cat: Any = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    id: int | str | None = None
    bp: str | None = None
    args: msgspec.Raw = msgspec.Raw()


_Num = int | float | str | None


class Links(msgspec.Struct):
    """The ``args`` keys that become columns."""

    external_id: _Num = msgspec.field(name="External id", default=None)
    correlation: _Num = None
    device: _Num = None
    stream: _Num = None
    bytes: _Num = None
    Bytes: _Num = None
    size: _Num = None


_EVENTS = msgspec.json.Decoder(list[Event])
_LINKS = msgspec.json.Decoder(list[Links])
_ANY = msgspec.json.Decoder()


class KinetoReader:
    name = "kineto"
    description = "PyTorch profiler trace (Kineto Chrome-trace JSON, .json or .json.gz)"

    def sniff(self, path: Path, head: bytes) -> bool:
        return b'"traceEvents"' in head or (
            path.name.endswith((".json", ".json.gz")) and head.lstrip()[:1] == b"["
        )

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        ev = Events(batches=iter(()), format=self.name)
        ev.batches = self._batches(path, diag, progress, ev)
        return ev

    def _batches(
        self, path: Path, diag: Diagnostics, progress: Progress | None, ev: Events
    ) -> Iterator[pa.RecordBatch]:
        total = path.stat().st_size
        stream = ArrayStream(path, b"traceEvents")
        flows: list[pa.RecordBatch] = []
        meta = _Metadata()
        index = 0  # event number in the file, for messages
        for chunk in stream.decoded(_decode_events):
            events = chunk.value
            if chunk.repairs is not None:
                _record_repairs(chunk, path, diag)
            if events is None:  # wrong types somewhere: lenient path
                events = _lenient(chunk, path, index, diag)
            batch, flow = _columns(events, index, path, meta, diag)
            n_events = len(events)
            del chunk, events
            if flow is not None:
                flows.append(flow)
            if progress is not None:
                progress(min(stream.bytes_read, total), total)
            yield batch
            index += n_events
        trace = stream.outer
        base = trace.get("baseTimeNanoseconds")
        base_ns = base if isinstance(base, int) and not isinstance(base, bool) else 0
        ev.flows = pa.Table.from_batches(flows, schema=FLOWS_SCHEMA)
        ev.trace = trace
        ev.clock = {
            "method": "kineto",
            "base_time_ns": base_ns,
            "note": "ts (microseconds, 3 decimals) converted exactly from text"
            + ("; offset by baseTimeNanoseconds (epoch)" if base_ns else ""),
        }
        ev.thread_names = meta.thread_names
        ev.process_names = meta.process_names
        ev.rank = _rank(trace, path)


def _decode_events(data: bytes) -> list[Event]:
    return _EVENTS.decode(data)


def _rank(trace: dict[str, Any], path: Path) -> int | None:
    info = trace.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    return rank_from_name(path.name)


def _record_repairs(chunk: Decoded[Any], path: Path, diag: Diagnostics) -> None:
    rep = chunk.repairs
    assert rep is not None
    where = f"{path}: events after byte {chunk.offset}"
    if rep.control_chars:
        diag.warn(
            "control_characters",
            f"{where}: {rep.control_chars} string(s) held raw control characters; "
            "kept as \\u escapes",
            rep.control_chars,
        )
    if rep.bare_words:
        diag.warn(
            "bare_words",
            f"{where}: {rep.bare_words} bare value(s) such as "
            f"{rep.first_bare_word.decode(errors='replace')} kept as strings",
            rep.bare_words,
        )


# -- lenient path ---------------------------------------------------------------------


def _lenient(chunk: Decoded[Any], path: Path, index: int, diag: Diagnostics) -> list[Event]:
    """Convert a chunk whose fields have unexpected types, one event at a time."""
    items = _ANY.decode(b"[" + chunk.data + b"]")
    out = []
    for k, item in enumerate(items):
        where = f"{path}: event #{index + k}"
        if not isinstance(item, dict):
            diag.warn("not_an_object", f"{where}: not a JSON object; kept as an instant")
            item = {"ph": "i", "name": str(item)[:200], "args": {"value": item}}
        out.append(_coerce(item, where, diag))
    return out


def _coerce(item: dict[str, Any], where: str, diag: Diagnostics) -> Event:
    ev = Event()
    ph = item.get("ph")
    ev.ph = ph if isinstance(ph, str) else ""
    ev.name = item.get("name")
    ev.cat = item.get("cat")
    for key in ("pid", "tid", "id"):
        v = item.get(key)
        if v is not None and not isinstance(v, (int, str)):
            diag.warn("bad_id", f"{where}: {key} {v!r} is not a number or string; as text")
            v = msgspec.json.encode(v).decode()
        setattr(ev, key, v)
    bp = item.get("bp")
    ev.bp = bp if isinstance(bp, str) else None
    for key in ("ts", "dur"):
        v = item.get(key)
        if v is None or isinstance(v, bool):
            continue
        if isinstance(v, (int, float, str)):
            setattr(ev, key, msgspec.Raw(msgspec.json.encode(v)))
        else:
            diag.warn("bad_time", f"{where}: {key} {v!r} is not a number; treated as absent")
    if "args" in item:
        args = item["args"]
        ev.args = msgspec.Raw(_dump(args))
    extra = {k: v for k, v in item.items() if k not in _KNOWN_KEYS}
    if extra:
        diag.warn("extra_fields", f"{where}: fields {sorted(extra)} kept under args")
        args = item.get("args")
        merged = dict(args) if isinstance(args, dict) else {"args": args} if args else {}
        merged.update(extra)
        ev.args = msgspec.Raw(_dump(merged))
    return ev


_KNOWN_KEYS = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "args", "s"}


def _dump(v: Any) -> bytes:
    import json  # big integers stay exact (orjson refuses those over 64 bits)

    return json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode()


# -- columns --------------------------------------------------------------------------

_BATCH_SCHEMA = pa.schema(
    [
        (S.LAYER, pa.string()),
        (S.CATEGORY, pa.string()),
        (S.NAME, pa.string()),
        (S.KIND, pa.string()),
        (S.START_NS, pa.int64()),
        (S.DUR_NS, pa.int64()),
        (S.PID, pa.int64()),
        (S.TID, pa.int64()),
        ("pid_label", pa.string()),
        ("tid_label", pa.string()),
        (S.DEVICE_COL, pa.int64()),
        (S.STREAM, pa.int64()),
        (S.EXTERNAL_ID, pa.int64()),
        (S.CORRELATION, pa.int64()),
        (S.BYTES, pa.int64()),
        (S.ARGS, pa.string()),
    ]
)


class _Metadata:
    def __init__(self) -> None:
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.process_names: dict[Any, str] = {}
        self.process_labels: dict[Any, str] = {}

    def add(self, ev: Event) -> None:
        if not len(ev.args):
            return
        try:
            args = _ANY.decode(ev.args)
        except msgspec.DecodeError:
            return
        if not isinstance(args, dict):
            return
        if ev.name == "thread_name" and isinstance(args.get("name"), str):
            self.thread_names[(ev.pid, ev.tid)] = args["name"].strip()
        elif ev.name == "process_name" and isinstance(args.get("name"), str):
            self.process_names.setdefault(ev.pid, args["name"].strip())
        elif ev.name == "process_labels" and isinstance(args.get("labels"), str):
            label = args["labels"].strip()
            self.process_labels[ev.pid] = label
            if label != "CPU":  # a device's label ("GPU 0") names its lanes best
                self.process_names[ev.pid] = label


def _columns(
    events: list[Event], index: int, path: Path, meta: _Metadata, diag: Diagnostics
) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
    rows: list[Event] = []
    flows: list[Event] = []
    for ev in events:
        ph = ev.ph
        if ph in KIND_OF_PHASE:
            rows.append(ev)
        elif ph == "M":
            meta.add(ev)
        elif ph in FLOW_PHASES:
            flows.append(ev)
        else:
            diag.warn(
                "unknown_phase",
                f"{path}: event #{index + len(rows)} {ev.name!r} has phase {ph!r}; "
                "kept as an instant",
            )
            rows.append(ev)
    return _row_batch(rows, index, path, diag), _flow_batch(flows, path, diag)


def _text(values: list[Any], what: str, path: Path, diag: Diagnostics) -> pa.Array:
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        diag.warn("non_string", f"{path}: some {what} values are not strings; kept as JSON")
        return pa.array(
            [v if isinstance(v, str) or v is None else _dump(v).decode() for v in values],
            pa.string(),
        )


def _ids(values: list[Any], what: str, path: Path, diag: Diagnostics) -> tuple[pa.Array, pa.Array]:
    """Numeric ids to int64 (null otherwise) plus the original text of the others."""
    try:
        return pa.array(values, pa.int64()), pa.nulls(len(values), pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    nums: list[int | None] = []
    labels: list[str | None] = []
    wide = 0
    for v in values:
        if isinstance(v, int) and -(1 << 63) <= v < (1 << 63):
            nums.append(v)
            labels.append(None)
        else:
            nums.append(None)
            labels.append(None if v is None else str(v))
            wide += isinstance(v, int)
    if wide:
        diag.warn("wide_integer", f"{path}: {wide} {what} value(s) exceed 64 bits; kept as text")
    return pa.array(nums, pa.int64()), pa.array(labels, pa.string())


def _times(raws: list[msgspec.Raw]) -> tuple[pa.Array, list[int]]:
    text = b"\n".join(raws).decode("utf-8", errors="replace")
    return decimal_text_to_ns(pl.Series("t", text.split("\n"), pl.String))


def _row_batch(rows: list[Event], index: int, path: Path, diag: Diagnostics) -> pa.RecordBatch:
    phs = [e.ph for e in rows]
    kind = pa.array([KIND_OF_PHASE.get(p, S.INSTANT) for p in phs], pa.string())
    names = [e.name for e in rows]
    if None in names:
        missing = sum(v is None for v in names)
        diag.warn("missing_name", f"{path}: {missing} event(s) without a name; named ''")
        names = ["" if v is None else v for v in names]
    name = _text(names, "name", path, diag)
    cats = [e.cat for e in rows]
    category = _text(cats, "cat", path, diag)
    if category.null_count:
        diag.warn(
            "missing_cat",
            f"{path}: {category.null_count} event(s) without a category (e.g. event "
            f"#{index + cats.index(None)} {names[cats.index(None)]!r}); category left null",
            category.null_count,
        )
    layer = _layers(category)
    pid, pid_label = _ids([e.pid for e in rows], "pid", path, diag)
    tid, tid_label = _ids([e.tid for e in rows], "tid", path, diag)

    start, rounded = _times([e.ts for e in rows])
    if start.null_count:
        bad = [i for i, v in enumerate(start.to_pylist()) if v is None]
        diag.warn(
            "bad_ts",
            f"{path}: event #{index + bad[0]} {names[bad[0]]!r} has ts "
            f"{bytes(rows[bad[0]].ts)[:40]!r}; placed at time 0",
            len(bad),
        )
        start = pa.compute.fill_null(start, 0)
    if rounded:
        diag.warn("sub_ns_time", f"{path}: {len(rounded)} ts value(s) rounded to 1 ns",
                  len(rounded))
    dur, rounded = _times([e.dur for e in rows])
    spans = pa.compute.equal(kind, S.SPAN)
    missing = pa.compute.and_(spans, pa.compute.is_null(dur))
    n_missing = pa.compute.sum(missing).as_py() or 0
    if n_missing:
        first = missing.to_pylist().index(True)
        diag.warn(
            "missing_dur",
            f"{path}: event #{index + first} {names[first]!r} (ph X) has no usable dur; "
            "duration 0",
            n_missing,
        )
    dur = pa.compute.fill_null(dur, 0)
    negative = pa.compute.less(dur, 0)
    n_neg = pa.compute.sum(negative).as_py() or 0
    if n_neg:
        first = negative.to_pylist().index(True)
        diag.warn(
            "negative_dur",
            f"{path}: event #{index + first} {names[first]!r} has dur "
            f"{bytes(rows[first].dur).decode(errors='replace')}; duration set to 0",
            n_neg,
        )
        dur = pa.compute.if_else(negative, 0, dur)
    # Instants and counters have no duration, whatever the file says.
    dur = pa.compute.if_else(spans, dur, 0)

    args, links = _args([e.args for e in rows], index, path, diag)
    cols = {
        S.LAYER: layer,
        S.CATEGORY: category,
        S.NAME: name,
        S.KIND: kind,
        S.START_NS: start,
        S.DUR_NS: dur,
        S.PID: pid,
        S.TID: tid,
        "pid_label": pid_label,
        "tid_label": tid_label,
        **links,
        S.ARGS: args,
    }
    return pa.RecordBatch.from_pydict(cols, schema=_BATCH_SCHEMA)


def _layers(category: pa.Array) -> pa.Array:
    cats = pl.Series("c", category)
    mapped = cats.replace_strict(LAYER_OF_CATEGORY, default=None, return_dtype=pl.String)
    expr = pl.coalesce(
        pl.col("m"),
        pl.when(
            pl.any_horizontal([pl.col("c").str.starts_with(p) for p in _RUNTIME_PREFIXES])
        ).then(pl.lit(S.RUNTIME)),
        pl.lit(S.FRAMEWORK),
    )
    return pl.DataFrame({"c": cats, "m": mapped}).select(expr)["m"].to_arrow()


def _args(
    raws: list[msgspec.Raw], index: int, path: Path, diag: Diagnostics
) -> tuple[pa.Array, dict[str, pa.Array]]:
    present = [i for i, r in enumerate(raws) if len(r)]
    n = len(raws)
    joined = b"\x00".join(raws[i] for i in present)
    try:
        text = joined.decode("utf-8")
    except UnicodeDecodeError as e:
        text = joined.decode("utf-8", errors="replace")
        bad = text.count("\ufffd") - joined.count("\ufffd".encode())
        near = index + present[joined.count(b"\x00", 0, e.start)]
        diag.warn(
            "invalid_utf8",
            f"{path}: invalid UTF-8 in the args of event #{near} (and maybe others); "
            "replaced with U+FFFD",
            max(bad, 1),
        )
    parts = text.split("\x00") if present else []
    if len(present) == n:
        args = pa.array(parts, pa.string())
    else:
        full: list[str | None] = [None] * n
        for i, p in zip(present, parts, strict=False):
            full[i] = p
        args = pa.array(full, pa.string())
    links = _links(raws, present, path, diag)
    return args, links


_LINK_COLUMNS = (
    (S.DEVICE_COL, ("device",)),
    (S.STREAM, ("stream",)),
    (S.EXTERNAL_ID, ("external_id",)),
    (S.CORRELATION, ("correlation",)),
    (S.BYTES, ("bytes", "Bytes", "size")),
)


def _links(
    raws: list[msgspec.Raw], present: list[int], path: Path, diag: Diagnostics
) -> dict[str, pa.Array]:
    n = len(raws)
    try:
        links: list[Links | None] = list(
            _LINKS.decode(b"[" + b",".join(raws[i] for i in present) + b"]")
        )
    except (msgspec.ValidationError, msgspec.DecodeError):
        links = []
        for i in present:
            try:
                links.append(msgspec.json.decode(raws[i], type=Links))
            except (msgspec.ValidationError, msgspec.DecodeError):
                links.append(None)
    out: dict[str, pa.Array] = {}
    for col, keys in _LINK_COLUMNS:
        vals: list[Any] = [None] * n
        for i, lk in zip(present, links, strict=False):
            if lk is None:
                continue
            for k in keys:
                v = getattr(lk, k)
                if v is not None:
                    vals[i] = v
                    break
        out[col] = _to_int64(vals, col, path, diag)
    return out


def _to_int64(vals: list[Any], col: str, path: Path, diag: Diagnostics) -> pa.Array:
    try:
        return pa.array(vals, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out: list[int | None] = []
    for v in vals:
        out.append(_as_int(v))
    return pa.array(out, pa.int64())


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        v = int(v) if v.is_integer() else None
    elif isinstance(v, str):
        s = v.strip()
        try:
            v = int(s, 16) if s.lower().startswith("0x") else int(s)
        except ValueError:
            return None
    if isinstance(v, int) and -(1 << 63) <= v < (1 << 63):
        return v
    return None


def _flow_batch(flows: list[Event], path: Path, diag: Diagnostics) -> pa.RecordBatch | None:
    if not flows:
        return None
    ids = []
    for e in flows:
        cat = e.cat if isinstance(e.cat, str) else ""
        ids.append(f"{cat}:{e.id}")
    pid, _ = _ids([e.pid for e in flows], "pid", path, diag)
    tid, _ = _ids([e.tid for e in flows], "tid", path, diag)
    ts, _ = _times([e.ts for e in flows])
    return pa.RecordBatch.from_pydict(
        {
            "flow_id": pa.array(ids, pa.string()),
            "phase": pa.array([e.ph for e in flows], pa.string()),
            "pid": pid,
            "tid": tid,
            "ts_ns": ts,
            "enclosing": pa.array([e.bp == "e" for e in flows], pa.bool_()),
        },
        schema=FLOWS_SCHEMA,
    )
