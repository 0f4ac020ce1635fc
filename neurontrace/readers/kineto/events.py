"""The events of a Kineto trace as msgspec structs, and the lenient path for odd ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from neurontrace.diagnostics import Diagnostics
from neurontrace.readers.jsonstream import Decoded


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


EVENTS = msgspec.json.Decoder(list[Event])
ANY_JSON = msgspec.json.Decoder()


def decode_events(data: bytes) -> list[Event]:
    return EVENTS.decode(data)


def record_repairs(chunk: Decoded[Any], path: Path, diag: Diagnostics) -> None:
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


def lenient(chunk: Decoded[Any], path: Path, diag: Diagnostics) -> list[Event]:
    """Convert a chunk whose fields have unexpected types, one event at a time."""
    items = ANY_JSON.decode(b"[" + chunk.data + b"]")
    out = []
    for k, item in enumerate(items):
        where = f"{path}: event #{k} after byte {chunk.offset}"
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
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
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
        ev.args = msgspec.Raw(dump(args))
    extra = {k: v for k, v in item.items() if k not in _KNOWN_KEYS}
    if extra:
        diag.warn("extra_fields", f"{where}: fields {sorted(extra)} kept under args")
        args = item.get("args")
        merged = dict(args) if isinstance(args, dict) else {"args": args} if args else {}
        merged.update(extra)
        ev.args = msgspec.Raw(dump(merged))
    return ev


_KNOWN_KEYS = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "args", "s"}


def dump(v: Any) -> bytes:
    """JSON text of ``v``; big integers stay exact (orjson refuses those over 64 bits)."""
    return json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode()


