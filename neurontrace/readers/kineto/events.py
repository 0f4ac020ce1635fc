"""The events of a Kineto trace as msgspec structs, and the lenient path for odd ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers.jsonrepair import PLACEHOLDER_CHARS, PLACEHOLDERS, restore_surrogates
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
_EVENT = msgspec.json.Decoder(Event)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_STR = msgspec.json.Decoder(str)
_ID = msgspec.json.Decoder(int | str | None)


def record_repairs(chunk: Decoded[Any], path: Path, diag: Diagnostics) -> None:
    """A warning for each kind of repair the chunk's text needed (see
    :class:`~neurontrace.readers.jsonrepair.Repairs`)."""
    rep = chunk.repairs
    assert rep is not None
    kept = "written back as they were in args" if rep.placeholders else "U+FFFD in args too"
    for code, n, what in (
        ("control_characters", rep.control_chars,
         "string(s) held raw control characters; kept as \\u escapes"),
        ("bare_words", rep.bare_words,
         f"bare value(s) such as {rep.first_bare_word.decode(errors='replace')} kept as strings"),
        ("invalid_utf8", rep.invalid_utf8, "invalid UTF-8 sequence(s) replaced with U+FFFD"),
        ("lone_surrogate", rep.surrogates,
         f"lone UTF-16 surrogate escape(s) such as \\ud800: U+FFFD in names and ids, {kept}"),
    ):
        if n:
            diag.warn(code, f"{path}: events after byte {chunk.offset}: {n} {what}", n)


def show_surrogates(events: list[Event], placeholders: bool) -> None:
    """Undo :func:`~neurontrace.readers.jsonrepair.repair`'s placeholders for lone
    surrogates: U+FFFD in the fields that must be valid text (and in the ``args`` of
    metadata events, whose names become track names), the input's own escapes written
    back in the ``args`` of the others. ``placeholders`` False: the repair wrote U+FFFD
    escapes already, nothing to undo."""
    if not placeholders:
        return
    for ev in events:
        for field in ("ph", "name", "cat", "pid", "tid", "id", "bp"):
            v = getattr(ev, field)
            if isinstance(v, str) and PLACEHOLDER_CHARS.search(v):
                setattr(ev, field, PLACEHOLDER_CHARS.sub("\ufffd", v))
        for field in ("ts", "dur", "args"):
            raw = bytes(getattr(ev, field))
            if b"\\uDB" in raw:
                fixed = PLACEHOLDERS.sub(rb"\\uFFFD", raw) if ev.ph == "M" else \
                    restore_surrogates(raw)
                setattr(ev, field, msgspec.Raw(fixed))


# -- lenient path ---------------------------------------------------------------------


def lenient(chunk: Decoded[Any], path: Path, diag: Diagnostics) -> list[Event]:
    """Convert a chunk that the typed decoder refused, one event at a time: an event it
    takes is what the fast path makes of it; in the others each field is decoded on
    its own from its text, and kept in the nearest form the table has (see
    :func:`_coerce`)."""
    try:
        items = _RAWS.decode(b"[" + chunk.data + b"]")
    except RecursionError:
        raise BadInput(f"{path}: the events after byte {chunk.offset} are nested too "
                       "deeply to decode") from None
    return [_one(bytes(raw), f"{path}: event #{k} after byte {chunk.offset}", diag)
            for k, raw in enumerate(items)]


def _one(raw: bytes, where: str, diag: Diagnostics) -> Event:
    try:
        return _EVENT.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        fields = _FIELDS.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        diag.warn("not_an_object", f"{where}: not a JSON object; kept as an instant")
        return Event(ph="i", name=_shown(raw, where, diag)[:200],
                     args=msgspec.Raw(b'{"value":' + raw + b"}"))
    return _coerce(fields, where, diag)


def _coerce(fields: dict[str, msgspec.Raw], where: str, diag: Diagnostics) -> Event:
    """One event from the text of each of its fields. Exact where the table keeps text
    (``args`` and times stay as written); a ``pid``/``tid``/``id`` that is neither an
    integer nor a string becomes its JSON text; ``name``/``cat`` of another type stay
    values (the columns write them as JSON); times that are not numbers or strings are
    absent; fields the table has no column for are kept under ``args``."""
    ev = Event()
    text = {k: bytes(v) for k, v in fields.items()}
    for key in ("ph", "bp"):  # strings, else left as if absent
        if text.get(key, b"")[:1] == b'"':
            setattr(ev, key, _string(text[key], where, diag))
    for key in ("name", "cat"):
        if key in text:
            setattr(ev, key, _value(text[key], where, diag))
    for key in ("pid", "tid", "id"):
        if key in text:
            setattr(ev, key, _id(key, text[key], where, diag))
    for key in ("ts", "dur"):
        v = text.get(key)
        if v is None or v[:1] in (b"n", b"t", b"f"):  # absent, null or a boolean
            continue
        if v[:1] in b'-0123456789"':
            setattr(ev, key, msgspec.Raw(v))
        else:
            diag.warn("bad_time", f"{where}: {key} {_shown(v, where, diag)[:40]!r} is not a "
                      "number; treated as absent")
    args = text.get("args")
    if args is not None:
        ev.args = msgspec.Raw(args)
    extra = {k: v for k, v in text.items() if k not in _KNOWN_KEYS}
    if extra:
        diag.warn("extra_fields", f"{where}: fields {sorted(extra)} kept under args")
        ev.args = msgspec.Raw(_merged(args, extra))
    return ev


_KNOWN_KEYS = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "args", "s"}


def _string(raw: bytes, where: str, diag: Diagnostics) -> str:
    """A JSON string's value (its invalid UTF-8, which the chunk's repair normally has
    replaced already, as U+FFFD)."""
    try:
        return _STR.decode(raw)
    except msgspec.DecodeError:
        diag.warn("invalid_utf8", f"{where}: a string that does not decode; U+FFFD put in")
        return raw.decode("utf-8", errors="replace")[1:-1]


def _value(raw: bytes, where: str, diag: Diagnostics) -> Any:
    """A field's value; its JSON text where it has no Python value (a number too large
    for a float, nesting too deep)."""
    if raw[:1] != b'"':
        try:
            return ANY_JSON.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            diag.warn("non_string", f"{where}: a value {raw[:40]!r} kept as its JSON text")
    return _shown(raw, where, diag)


def _shown(raw: bytes, where: str, diag: Diagnostics) -> str:
    """A value as a name: a string's text, else the JSON text."""
    if raw[:1] == b'"':
        return _string(raw, where, diag)
    return raw.decode("utf-8", errors="replace")


def _id(key: str, raw: bytes, where: str, diag: Diagnostics) -> int | str | None:
    try:
        return _ID.decode(raw)
    except msgspec.ValidationError:
        shown = raw.decode("utf-8", errors="replace")
        diag.warn("bad_id", f"{where}: {key} {shown[:40]} is not a number or string; as text")
        return shown
    except msgspec.DecodeError:
        return _shown(raw, where, diag)


def _merged(args: bytes | None, extra: dict[str, bytes]) -> bytes:
    """The JSON text of ``args`` (an object's members, or ``{"args": args}`` for a value
    of another type) with ``extra``'s members added, every value as written."""
    members: dict[str, bytes] = {}
    if args is not None:
        try:
            members = {k: bytes(v) for k, v in _FIELDS.decode(args).items()}
        except (msgspec.DecodeError, RecursionError):
            members = {"args": args}
    members.update(extra)
    return b"{" + b",".join(msgspec.json.encode(k) + b":" + v for k, v in members.items()) + b"}"
