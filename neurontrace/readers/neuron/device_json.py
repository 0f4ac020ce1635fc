"""Neuron's device-side JSON: the device profile and ``summary-json``.

Device profile (``neuron-explorer view --output-format json -n x.neff -s y.ntff``;
``ntff.json`` or ``device_profile_model_<id>.json``): keys ``summary`` (a list of one
object), ``instruction``, sometimes ``dma``, ``instruction_usage``, ``metadata``.

The time unit of ``timestamp``/``duration`` is disputed (the docs say ns since the
execution started; a user measured picoseconds), so it is calibrated: the span of the
instructions is compared with ``summary.total_time`` (seconds)::

    span / total_time  ~ 1     -> nanoseconds
    span / total_time  ~ 1000  -> picoseconds (divided by 1000, rounded half up)
    otherwise                  -> nanoseconds as documented, with a warning

Without a ``summary`` (some files have none) the unit comes from the other clues, in
order: a unit the file declares (``metadata.timestamp_unit`` / ``time_unit``, or the
rows' own ``timestamp_unit``), then ``metadata.total_time`` as above; with none of them,
nanoseconds as documented, with a warning. The choice, and the clue it came from
(``unit_source``), go into the output's ``neurontrace.clock`` metadata. A device profile
alone has no host time, so its rows stay on the device timeline.

Layouts seen besides the documented one are read too (formats.md §3b): the engine of an
instruction in ``subgroup`` when there is no ``label``; a DMA row's queue in ``label`` or
``subgroup`` when there is no ``queue``, and its size in ``transfer_size`` (else
``size``); ``hlo_attrs`` as text (a JSON object in text is decoded into ``args``, other
text kept as it is); ``summary`` as one object instead of a list of one.

``summary-json`` comes in three shapes: keyed by core (``{"n_abc": {...}}``), flat
(``{"total_time": ...}``) and ``{"Summary": [...]}``; it holds no events, and its rows are
kept in the output's ``neurontrace.trace`` metadata under ``neuron.tables.Summary``.
"""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, one_line, shown
from neurontrace.readers import neuron as N
from neurontrace.readers.base import Events, Progress
from neurontrace.readers.jsonopen import open_binary
from neurontrace.readers.neuron.explorer_rows import device_rows

#: Top-level keys of a device profile; a document with none of them is not one.
DEVICE_KEYS = ("summary", "instruction", "dma", "instruction_usage")
_DEVICE_HEAD = re.compile(rb'"(%b)"\s*:\s*\[' % "|".join(DEVICE_KEYS).encode())
#: (low, high, unit, divisor): accepted ratios of instruction span to total_time.
UNITS = ((0.5, 2.0, "ns", 1), (500.0, 2000.0, "ps", 1000))
#: Per table: the fields read (as text; an instruction's ``timestamp_unit`` is a clue to
#: the unit), and those taken out of ``args`` (the fallbacks stay there too).
TABLES = {
    "instruction": (("timestamp", "duration", "opcode", "label", "subgroup", "timestamp_unit"),
                    ("timestamp", "duration", "opcode", "label")),
    "dma": (("timestamp", "duration", "queue", "label", "subgroup", "transfer_size", "size"),
            ("timestamp", "duration", "queue", "transfer_size")),
}
#: Declared time units accepted, and their divisor to ns.
DECLARED_UNITS = {"ns": 1, "ps": 1000}


#: Integers of more digits than int64 holds are kept as their text (read as no number).
_INT_DIGITS = 18
_SURROGATE = re.compile("[\ud800-\udfff]")


def _load(path: Path, diag: Diagnostics) -> Any:
    """The whole JSON document, by msgspec, or, where msgspec refuses what Python's
    ``json`` reads (a number beyond float64 or int64 such as ``1e400``, a lone surrogate
    escape ``"\\ud800"``, a byte-order mark, invalid UTF-8), by ``json``: such numbers as
    ``inf`` or, for an integer of more than ``_INT_DIGITS`` digits, its text; invalid
    UTF-8 and lone surrogates as U+FFFD, with a warning."""
    try:
        with open_binary(path) as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise BadInput(f"{shown(path)}: cannot be read ({one_line(str(e))})") from None
    try:
        return msgspec.json.decode(data)
    except RecursionError:
        raise BadInput(f"{shown(path)}: JSON nested too deeply to read") from None
    except msgspec.DecodeError as e:
        refused = e
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = data.decode(errors="replace")
        diag.warn("invalid_utf8", f"{shown(path)}: invalid UTF-8 replaced with U+FFFD")
    try:
        doc = json.loads(text.removeprefix("\ufeff"), parse_int=_int_or_text)
    except RecursionError:
        raise BadInput(f"{shown(path)}: JSON nested too deeply to read") from None
    except ValueError:
        raise BadInput(f"{shown(path)}: invalid JSON ({one_line(str(refused))})") from None
    found = [0]
    doc = _no_surrogates(doc, found)
    if found[0]:
        diag.warn("lone_surrogate", f"{shown(path)}: {found[0]} string(s) with a lone UTF-16 "
                  "surrogate escape such as \\ud800; U+FFFD put in", found[0])
    return doc


def _int_or_text(text: str) -> int | str:
    return int(text) if len(text.lstrip("-")) <= _INT_DIGITS else text


def _no_surrogates(v: Any, found: list[int]) -> Any:
    """``v`` with lone surrogates in its strings (keys too) replaced by U+FFFD, counted in
    ``found[0]`` (text with them cannot be encoded as UTF-8)."""
    if isinstance(v, str):
        if _SURROGATE.search(v):
            found[0] += 1
            return _SURROGATE.sub("\ufffd", v)
        return v
    if isinstance(v, list):
        return [_no_surrogates(x, found) for x in v]
    if isinstance(v, dict):
        return {_no_surrogates(k, found): _no_surrogates(x, found) for k, x in v.items()}
    return v


def _rows(doc: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    v = doc.get(key)
    if v is None:
        return []
    if isinstance(v, dict) and key == "summary":  # one object, not a list of one
        return [v]
    if not isinstance(v, list):
        raise BadInput(f"{shown(path)}: field {key!r} is not a list")
    return [r for r in v if isinstance(r, dict)]


class DeviceJsonReader:
    name = "neuron-device-json"
    description = "Neuron device profile JSON (neuron-explorer view --output-format json)"

    def sniff(self, path: Path, head: bytes) -> bool:
        return bool(_DEVICE_HEAD.search(head))

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        return Events.filled_by(self.name, lambda ev: self._batches(path, diag, ev))

    def _batches(self, path: Path, diag: Diagnostics, ev: Events) -> Iterator[pa.RecordBatch]:
        doc = _load(path, diag)
        if not isinstance(doc, dict):
            raise BadInput(f"{shown(path)}: top level is not a JSON object")
        if not doc.keys() & set(DEVICE_KEYS):  # e.g. --format neuron-device-json on Kineto
            raise BadInput(f"{shown(path)}: not a Neuron device profile (none of "
                           f"{', '.join(DEVICE_KEYS)} at the top level)")
        summary = _rows(doc, "summary", path)
        frames = {t: _frame(_rows(doc, t, path), *fields) for t, fields in TABLES.items()}
        for (name, table), col in product(frames.items(), ("timestamp", "duration")):
            # rows whose time is given but is no number _number reads
            bad = table.select((pl.col(col).is_not_null() & _number(col).is_null()).sum()).item()
            if bad:
                diag.warn("bad_ts", f"{shown(path)}: {bad} {name} row(s) have a {col} that "
                          "is not an integer number of ns; read as 0", bad)
        meta = doc.get("metadata")
        unit, divisor, calib = calibrate(frames["instruction"], summary, meta, path, diag)
        nc = N.nc_from_name(path.stem)
        if nc is None and isinstance(meta, dict):
            nc = N.int_value(meta.get("nc_idx"))
        for name, table in frames.items():
            if table.height:
                yield N.to_batch(_device(table, name, divisor, nc))
        if any(table.height for table in frames.values()):
            diag.warn("device_clock_unplaced",
                      f"{shown(path)}: a device profile holds no host time; device rows keep "
                      "device-relative times")
        usage = doc.get("instruction_usage")
        ev.trace = {"neuron": {
            "format": "device-profile-json",
            "tables": {"Summary": summary, "Metadata": meta},
            "instruction_usage_rows": len(usage) if isinstance(usage, list) else None,
            "other_keys": sorted(k for k in doc if k not in (*DEVICE_KEYS, "metadata")),
        }}
        ev.clock = {"base_time_ns": 0, "method": "none", "time_unit": unit,
                    "calibration": calib,
                    "note": "device-relative times: no host clock in a device profile"}


def _frame(rows: list[dict[str, Any]], used: tuple[str, ...],
           taken: tuple[str, ...]) -> pl.DataFrame:
    """Columns ``used`` as text, and ``args``: each row less the fields ``taken``."""
    rows = [_attrs_decoded(r) for r in rows]
    data = {k: [N.json_text(r.get(k)) for r in rows] for k in used}
    data[S.ARGS] = [N.json_text({k: v for k, v in r.items() if k not in taken}) for r in rows]
    return pl.DataFrame(data, schema={k: pl.String for k in data})


def _number(col: str) -> pl.Expr:
    """The text column ``col`` as int64 (:func:`.int_text`; device times are small)."""
    return N.int_text(pl.col(col))


def _attrs_decoded(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with an ``hlo_attrs`` given as the text of a JSON object decoded (other
    text is kept as it is)."""
    text = row.get("hlo_attrs")
    if isinstance(text, str) and text.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):  # JSON text opening with { is an object
            return {**row, "hlo_attrs": json.loads(text)}
    return row


def calibrate(instr: pl.DataFrame, summary: list[dict[str, Any]], meta: Any, path: Path,
              diag: Diagnostics) -> tuple[str, int, dict[str, Any]]:
    """(unit, divisor to ns, what was measured and from which clue: ``unit_source``).

    ``summary.total_time`` (seconds) first; without it, a declared unit (``metadata``'s
    ``timestamp_unit``/``time_unit``, else the one all instruction rows that carry a
    ``timestamp_unit`` agree on), then ``metadata.total_time``; else nanoseconds, as
    documented, with a warning."""
    total = summary[0].get("total_time") if summary else None
    source = "summary.total_time"
    if not isinstance(total, (int, float)) or total <= 0:
        meta = meta if isinstance(meta, dict) else {}
        units = instr.get_column("timestamp_unit").drop_nulls().str.strip_chars() \
            .str.to_lowercase().unique()
        clues = [*((meta.get(k), f"metadata.{k}") for k in ("timestamp_unit", "time_unit")),
                 (units[0] if len(units) == 1 else None, "instruction.timestamp_unit")]
        unit, clue = next(((u.strip().lower(), c) for u, c in clues if isinstance(u, str)),
                          ("", ""))  # the first clue given
        if unit in DECLARED_UNITS:
            return unit, DECLARED_UNITS[unit], {"unit_source": clue}
        total = meta["total_time"] if isinstance(meta.get("total_time"), (int, float)) else None
        source = "metadata.total_time"
    if instr.height == 0:
        return "ns", 1, {"note": "no instructions", "unit_source": "none (no instructions)"}
    span = instr.select(
        ((_number("timestamp") + _number("duration").fill_null(0)).max()
         - _number("timestamp").min()).alias("s")
    ).item()
    if not isinstance(total, (int, float)) or total <= 0 or not span:
        diag.warn("device_time_unit", f"{shown(path)}: no summary.total_time, declared unit "
                  "or metadata.total_time to calibrate the time unit against; read as "
                  "nanoseconds (as documented)")
        return "ns", 1, {"span_raw": span, "total_time_s": total, "assumed": True,
                         "unit_source": "assumed: documented ns"}
    ratio = span / (total * 1e9)
    calib = {"span_raw": span, "total_time_s": total, "ratio": round(ratio, 6),
             "unit_source": source}
    for low, high, unit, divisor in UNITS:
        if low <= ratio <= high:
            return unit, divisor, calib
    diag.warn("device_time_unit", f"{shown(path)}: instruction span is {ratio:.3g} x "
              f"{source}, neither ns nor ps; read as nanoseconds (as documented)")
    return "ns", 1, {**calib, "assumed": True, "unit_source": "assumed: documented ns"}


#: Per table: the Explorer table of the same rows (:func:`.explorer_rows.device_rows` maps
#: both to events), and its columns, from ours.
AS_EXPLORER = {
    "instruction": ("Instruction", {"engine": pl.coalesce("label", "subgroup"),
                                    "opcode": pl.col("opcode")}),
    "dma": ("DmaPacket", {"queue_name": pl.coalesce("queue", "label", "subgroup"),
                          "transfer_bytes": pl.coalesce(
                              *(pl.col(c).str.strip_chars().cast(pl.Int64, strict=False)
                                for c in ("transfer_size", "size")))}),
}


def _device(df: pl.DataFrame, table: str, divisor: int, nc: int | None) -> pl.DataFrame:
    """The rows of ``table`` as events, as Explorer's table of the same rows reads, in
    our ``category`` and ``args``."""
    def ns(col: str) -> pl.Expr:
        v = _number(col)
        return v if divisor == 1 else (v + divisor // 2) // divisor

    explorer_table, columns = AS_EXPLORER[table]
    rows = df.select(
        ns("timestamp").fill_null(0).alias(S.START_NS),
        ns("duration").fill_null(0).clip(0).alias(S.DUR_NS),
        _nc=pl.lit(nc, pl.Int64), pcore_idx=pl.lit(None, pl.Int64), **columns,
    )
    return device_rows(explorer_table, rows).with_columns(pl.lit(table).alias(S.CATEGORY),
                                                          df.get_column(S.ARGS))


class SummaryJsonReader:
    name = "neuron-summary-json"
    description = "Neuron summary-json (keyed by core, flat, or {\"Summary\": [...]}); no events"

    def sniff(self, path: Path, head: bytes) -> bool:
        return head.lstrip()[:1] == b"{" and (b'"Summary"' in head or b'"total_time"' in head)

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        doc = _load(path, diag)
        shape, rows = summary_rows(doc, path)
        return Events(
            batches=iter(()), format=self.name,
            trace={"neuron": {"format": "summary-json", "shape": shape,
                              "tables": {"Summary": rows}}},
            clock={"base_time_ns": 0, "method": "none", "note": "a summary has no events"},
        )


def summary_rows(doc: Any, path: Path) -> tuple[str, list[dict[str, Any]]]:
    """(shape, rows) of a summary-json document, whatever its shape."""
    if isinstance(doc, dict) and isinstance(doc.get("Summary"), list):
        return "list", [r for r in doc["Summary"] if isinstance(r, dict)]
    if isinstance(doc, dict) and doc and all(isinstance(v, dict) for v in doc.values()):
        return "keyed", [{"key": k, **v} for k, v in doc.items()]
    if isinstance(doc, dict) and "total_time" in doc:
        return "flat", [doc]
    raise BadInput(f"{shown(path)}: not a summary-json: expected a Summary list, objects keyed by "
                   "core, or a flat object with total_time")
