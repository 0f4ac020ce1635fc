"""Generated hostile inputs for the whole command line, checked case by case.

Case number ``i`` seeds ``random.Random(f"{SALT}:{i}")``, which builds one case: the files
(or folders, links, FIFOs) of its inputs, written into a fresh folder, and a command line
(mostly ``convert IN OUT``; also ``ops``, ``gaps``, ``copies``, ``steps``, ``report`` and
``export`` on the input or on a converted output). The family is ``FAMILIES[i % 10]``;
each case names its family and variant, so a failure reads short. A case is the same
bytes on every run and machine (given the fixtures and the pyarrow version).

Every case runs in-process through click's runner against the real error boundary
(``neurontrace.cli.main.cli``), under a wall-clock limit, and is checked for:

- ``unbounded``: it ran past the limit (a timer interrupts it; one stuck in C code is
  killed with its worker);
- ``input-changed``: an input's bytes, mode, type or link target changed, or a file
  appeared inside an input folder;
- ``traceback`` / ``exit-N``: the exit code is 0 or 2, nothing escaped the boundary, no
  ``Traceback`` on stdout or stderr;
- ``not-one-line``: a failure (exit 2) prints exactly one line on stderr;
- ``left-behind``: no file is left in the case's folder (nor in its ``TMPDIR`` or working
  folder) other than the inputs and, on exit 0, the declared outputs;
- ``expected-exit-N``: where the README or issue 13 says what must happen (a valid trace
  converts; an output that is its own input, or whose parent is a file, is refused);
- ``events-lost`` / ``extra-rows`` / ``no-event-array`` / ``no-output``: for an input
  that Python's ``json`` can parse (after gzip; invalid UTF-8, which the README says is
  kept, decoded with ``surrogateescape``; control characters allowed, as the README keeps
  them), a convert that exits 0 writes between ``lo`` and ``hi`` rows: ``lo`` counts the
  ``X``/``i``/``I``/``C`` events (README: one row each), ``hi`` adds every other element
  that is not metadata (``M``) or a flow (``s``/``t``/``f``): the reader keeps an unknown
  phase, or an element that is not an object, as an instant. The events are the top-level
  ``traceEvents`` array, or the document itself when it is a bare array; a document with
  no such array must not convert to an empty success, and duplicate top-level
  ``traceEvents`` arrays must all be kept;
- ``output-mode``: written files get the permissions the umask gives (0644 here).

Run ``python tests/fuzzing.py --cases 10000`` (``make fuzz``); ``--family F`` runs only
that family, ``--show N`` writes case N into a folder to reproduce it by hand.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from random import Random
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SALT = "neurontrace-fuzz-1"
FAMILIES = ("structure", "numbers", "encodings", "truncation", "byteflip", "events", "gzip",
            "filesystem", "explorer", "parquet")
#: Seconds a case may run; past it the case is a failure (``unbounded``).
LIMIT_S = 10.0
#: Seconds after the limit before a worker stuck in C code is killed.
GRACE_S = 5.0
#: Resident memory a worker (with its children) may reach before it is killed.
MEMORY_LIMIT = 3 << 30
ROW_PHASES = frozenset({"X", "i", "I", "C"})
NOT_ROWS = frozenset({"M", "s", "t", "f"})
UMASK = 0o022
RAW = "@@RAW{}@@"  # a string value replaced by raw bytes after serialising

# ----------------------------------------------------------------------------- sources


def _plain(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


@cache
def raw_traces() -> dict[str, bytes]:
    """Every Kineto fixture and capture trace, decompressed: name -> bytes."""
    paths = sorted((FIXTURES / "kineto").glob("*.json")) + sorted(
        (FIXTURES / "kineto").glob("*.json.gz")) + sorted(
        (FIXTURES / "capture").glob("*/*/trace.json.gz"))
    return {str(p.relative_to(FIXTURES)): _plain(p.read_bytes()) for p in paths}


def loads(data: bytes) -> Any:
    """``json.loads`` as the oracle uses it: control characters allowed, invalid UTF-8
    decoded with ``surrogateescape``; a top-level object with duplicate ``traceEvents``
    keys comes back as :class:`Dups`."""
    try:
        return json.loads(data, strict=False, object_pairs_hook=_pairs)
    except UnicodeDecodeError:
        return json.loads(data.decode("utf-8", "surrogateescape"), strict=False,
                          object_pairs_hook=_pairs)


class Dups(dict):  # type: ignore[type-arg]
    """An object with several ``traceEvents`` keys; ``arrays`` holds each value."""

    arrays: list[Any]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    values = [v for k, v in pairs if k == "traceEvents"]
    if len(values) < 2:
        return dict(pairs)
    d = Dups(pairs)
    d.arrays = values
    return d


@cache
def good_docs() -> dict[str, bytes]:
    """The fixtures that are valid traces and convert today (name -> JSON text)."""
    out = {}
    for name, data in raw_traces().items():
        if name.endswith(("not-a-trace.json", "truncated.json", "bare-na.json")):
            continue
        try:
            loads(data)
        except ValueError:
            continue
        out[name] = data
    return out


@cache
def _shapes() -> dict[str, list[str]]:
    """Good traces by shape: "object" (a ``traceEvents`` object) and "array" (bare)."""
    out: dict[str, list[str]] = {"object": [], "array": [], "any": []}
    for name, data in sorted(good_docs().items()):
        out["array" if isinstance(loads(data), list) else "object"].append(name)
        out["any"].append(name)
    return out


def fresh_doc(rng: Random, shape: str = "any") -> tuple[str, Any]:
    """A random good trace of ``shape`` (any, object, array), parsed anew (so it may be
    mutated)."""
    name = rng.choice(_shapes()[shape])
    return name, loads(good_docs()[name])


def events_of(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return doc
    ev = doc.get("traceEvents")
    return ev if isinstance(ev, list) else []


def dump(doc: Any, rng: Random | None = None, raw: dict[str, bytes] | None = None) -> bytes:
    """``doc`` as JSON bytes, in a random style (compact, Kineto's indent, one event a
    line); ``raw`` replaces ``"@@RAWk@@"`` string values by raw bytes."""
    style = rng.choice(("kineto", "compact", "lines", "spaced")) if rng else "kineto"
    if style == "kineto":
        text = json.dumps(doc, indent=2, ensure_ascii=False)
    elif style == "compact":
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    elif style == "spaced":
        text = json.dumps(doc, ensure_ascii=False)
    else:
        text = _lines(doc)
    data = text.encode("utf-8", "surrogateescape")
    for key, value in (raw or {}).items():
        data = data.replace(json.dumps(key).encode(), value)
    return data


def _lines(doc: Any) -> str:
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        inner = ",\n".join(json.dumps(e, ensure_ascii=False) for e in doc["traceEvents"])
        body = json.dumps(head, ensure_ascii=False)[1:-1]
        return "{" + body + (", " if body else "") + '"traceEvents": [\n' + inner + "\n]}\n"
    return json.dumps(doc, ensure_ascii=False)


@cache
def explorer_dirs() -> dict[str, dict[str, bytes]]:
    """Explorer fixture folders: name -> {file name: bytes}."""
    return {d.name: {p.name: p.read_bytes() for p in sorted(d.iterdir())}
            for d in sorted((FIXTURES / "neuron").glob("explorer_*"))}


@cache
def event_tables() -> dict[str, bytes]:
    """Event tables as ``convert`` writes them (Parquet bytes, with the metadata) of a few
    fixtures: what the analyses are given."""
    import pyarrow.parquet as pq

    import neurontrace

    out = {}
    for rel in ("kineto/cuda-launch-chain.json", "capture/cuda/naive/trace.json.gz",
                "capture/cuda-eps-copy/eps_copied/trace.json.gz",
                "kineto/cpu-rmsnorm-naive.json.gz", "kineto/nested-ops.json"):
        table = neurontrace.load(FIXTURES / rel)
        buf = io.BytesIO()
        pq.write_table(table, buf)
        out[rel] = buf.getvalue()
    return out


# ----------------------------------------------------------------------------- cases


@dataclass
class Entry:
    """One thing a case creates: ``kind`` is file, dir, symlink, hardlink (to ``target``,
    relative to the case folder), fifo or device (a character device like /dev/null)."""

    path: str
    kind: str = "file"
    data: bytes = b""
    target: str = ""
    mode: int | None = None


@dataclass
class Case:
    """One generated case. Paths are relative to the case folder; ``{C}`` in ``argv`` and
    ``then`` stands for it."""

    number: int
    family: str
    variant: str = ""
    argv: list[str] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    #: What the command may write (on exit 0): these paths and everything under them.
    outputs: list[str] = field(default_factory=list)
    #: Entries that are not inputs (the command may replace them); all others must stay.
    replaceable: list[str] = field(default_factory=list)
    #: Trace files whose events must all be rows of the Parquet at ``rows_at``.
    counted: list[str] = field(default_factory=list)
    rows_at: str | None = None
    expect: int | None = None
    why: str = ""
    #: A command run on the output when ``argv`` exits 0.
    then: list[str] | None = None
    #: Folders made read-only once written.
    readonly: list[str] = field(default_factory=list)
    #: Why the case cannot run here (None: it runs).
    needs: str | None = None
    #: Run in a worker process that has run no case before (what happens once per
    #: process, such as starting the span decoders, then happens as on the command line).
    fresh: bool = False

    def file(self, path: str, data: bytes, mode: int | None = None) -> str:
        self.entries.append(Entry(path, "file", data, mode=mode))
        return path

    def expecting(self, code: int, why: str) -> None:
        self.expect, self.why = code, why

    def describe(self) -> str:
        return f"#{self.number} {self.family}: {self.variant}"


def generate(number: int) -> Case:
    """Case ``number``: the same case on every run."""
    rng = Random(f"{SALT}:{number}")
    family = FAMILIES[number % len(FAMILIES)]
    case = Case(number, family)
    GENERATORS[family](rng, case)
    right = "neuron-explorer" if family == "explorer" else "kineto"
    if case.expect == 0 and "--format" in case.argv and \
            case.argv[case.argv.index("--format") + 1] != right:
        case.expect = None  # another format's reader may refuse it: exit 2 is right too
    if "--format" in case.argv:
        case.variant += f"; --format {case.argv[case.argv.index('--format') + 1]}"
    return case


def numbers_of(family: str | None, start: int, count: int) -> list[int]:
    """The first ``count`` case numbers from ``start`` on (of ``family`` only, if given)."""
    if family is None:
        return list(range(start, start + count))
    k = FAMILIES.index(family)
    first = start + (k - start) % len(FAMILIES)
    return list(range(first, first + count * len(FAMILIES), len(FAMILIES)))


def slice_numbers(count: int = 300, spread: int = 10_000) -> list[int]:
    """A deterministic slice of ``count`` case numbers spread over ``range(spread)``;
    the step is odd and prime to the family count, so every family appears alike."""
    step = spread // count
    while step % 2 == 0 or step % len(FAMILIES) in (0, 5):
        step -= 1
    return [k * step for k in range(count)]


# -- commands

#: ``--format`` values: the right one for a trace, and the wrong ones (a Kineto trace read
#: as another format must be refused or keep its events, not make an empty table).
FORMATS = ("kineto", "kineto", "neuron-device-json", "neuron-system-json", "neuron-live-json",
           "neuron-summary-json", "neurontrace-export", "neuron-explorer", "neuron-run",
           "neuron-raw")
ANALYSES = (["ops"], ["ops", "--layer", "device"], ["ops", "--json"], ["gaps"],
            ["gaps", "--json"], ["copies"], ["copies", "--json"], ["steps"], ["steps", "--json"],
            ["report"], ["report", "--json"])


def command(rng: Random, case: Case, src: str, *, counted: bool = True,
            analyses: float = 0.2) -> None:
    """Give ``case`` a command on the input at ``src``: mostly ``convert`` (sometimes
    followed by an analysis of its output), else an analysis, ``report --html`` or
    ``export``."""
    roll = rng.random()
    if roll < analyses:
        pick = rng.randrange(len(ANALYSES) + 2)
        if pick == len(ANALYSES):
            case.argv = ["report", f"{{C}}/{src}", "--html", "{C}/report.html"]
            case.outputs.append("report.html")
        elif pick == len(ANALYSES) + 1:
            case.argv = ["export", f"{{C}}/{src}", "{C}/export.json"]
            case.outputs.append("export.json")
        else:
            case.argv = [*ANALYSES[pick], f"{{C}}/{src}"]
        return
    out = rng.choice(("out/trace.parquet", "trace.parquet", "out/deeper/x.parquet"))
    case.argv = ["convert", f"{{C}}/{src}", f"{{C}}/{out}"]
    if rng.random() < 0.1:
        case.argv.append("-v")
    if rng.random() < 0.05:
        case.argv += ["--rank", str(rng.choice((0, 1, 7, 4095)))]
    if rng.random() < 0.04:
        case.argv += ["--format", rng.choice(FORMATS)]
    case.outputs.append(out)
    case.rows_at = out
    if counted:
        case.counted.append(src)
    if rng.random() < 0.12:
        then = rng.choice([*ANALYSES, ["export", "EXPORT"], ["report", "HTML"]])
        if then == ["export", "EXPORT"]:
            case.then = ["export", f"{{C}}/{out}", "{C}/export.json"]
            case.outputs.append("export.json")
        elif then == ["report", "HTML"]:
            case.then = ["report", f"{{C}}/{out}", "--html", "{C}/report.html"]
            case.outputs.append("report.html")
        else:
            case.then = [*then, f"{{C}}/{out}"]


def trace_name(rng: Random, gz: bool) -> str:
    stem = rng.choice(("trace", "trace", "rank_3_trace", "worker0.pt.trace", "t"))
    return f"in/{stem}.json" + (".gz" if gz else "")


def compress(rng: Random, data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=rng.choice((1, 6, 9)), mtime=0)


# -- family: structure

GARBAGE = (b"x", b"]", b",", b"{}", b"[1]", b"\x00\x00", b"garbage", b",{}", b"}", b"null",
           b'{"ph": "X"}', b"\n[]")


def structure(rng: Random, case: Case) -> None:
    name, doc = fresh_doc(rng)
    bare = isinstance(doc, list)
    events = events_of(doc)
    variant = rng.choice((
        "reorder-top-keys", "reorder-event-keys", "dup-event-keys", "styles", "header-extra",
        "header-long-first", "header-huge-field", "nested-traceEvents-before",
        "nested-traceEvents-after", "dup-top-traceEvents", "bare-array", "bare-array-garbage",
        "object-garbage", "trailing-whitespace", "only-nested-traceEvents",
        "traceEvents-not-list", "tiny-documents", "wrapped-in-array", "nested-event-arrays",
        "traceEvents-first",
    ))
    valid = False
    raw: dict[str, bytes] = {}
    data: bytes
    if variant == "reorder-top-keys" and not bare:
        items = list(doc.items())
        rng.shuffle(items)
        data, valid = dump(dict(items), rng), True
    elif variant == "traceEvents-first" and not bare:
        doc = {"traceEvents": doc.pop("traceEvents"), **doc}
        data, valid = dump(doc, rng), True
    elif variant == "reorder-event-keys":
        for i, e in enumerate(events):
            if isinstance(e, dict):
                items = list(e.items())
                rng.shuffle(items)
                events[i] = dict(items)
        data, valid = dump(doc, rng), not bare  # a bare array needs "ph" near its start
    elif variant == "dup-event-keys":
        data, valid = _dup_event_keys(rng, doc), True
    elif variant == "header-extra" and not bare:
        for k in range(rng.randint(1, 4)):
            doc[f"extra_{k}"] = rng.choice(({"a": [1, 2, {"b": None}]}, "text", 3.5, [], None,
                                            {"traceName": "x"}))
        items = list(doc.items())
        rng.shuffle(items)
        data, valid = dump(dict(items), rng), True
    elif variant == "header-long-first" and not bare:
        size = rng.choice((5000, 40_000, 300_000))
        first = rng.choice(("x" * size, [{"k": "v" * 50}] * (size // 60)))
        doc = {"displayTraceFirst": first, **doc}
        data = dump(doc, rng)
    elif variant == "header-huge-field" and not bare:
        size = rng.choice((1 << 20, 4 << 20))
        items = list(doc.items())
        items.insert(rng.randint(1, len(items)), ("hugeField", "n" * size))  # not first
        data, valid = dump(dict(items), rng), True
    elif variant in ("nested-traceEvents-before", "nested-traceEvents-after") and not bare:
        inner = rng.choice(([], events[:1], events[:3]))
        holder = rng.choice(("deviceProperties", "distributedInfo", "meta", "traceName"))
        value = rng.choice(({"traceEvents": inner}, [{"traceEvents": inner}],
                            {"a": {"traceEvents": inner}}))
        doc.pop(holder, None)
        if variant.endswith("before"):
            doc = {holder: value, **doc}
        else:
            doc[holder] = value
        data = dump(doc, rng)
    elif variant == "dup-top-traceEvents" and not bare:
        cut = rng.randint(0, len(events))
        first, second = rng.choice(((events[:cut], events[cut:]), (events, []), ([], events),
                                    (events, events)))
        doc["traceEvents"] = RAW.format(0)
        raw[RAW.format(0)] = (json.dumps(first).encode() + b', "traceEvents": '
                              + json.dumps(second).encode())
        data = dump(doc, rng, raw)
    elif variant == "bare-array":
        data = dump(events, rng)
        valid = b'"ph"' in data[:4096]  # what tells a bare array of events (README)
    elif variant == "bare-array-garbage":
        data = dump(events, rng) + rng.choice(GARBAGE + (dump(events[:2]),))
        case.expecting(2, "garbage or a second array after a bare array (issue 13, class 5)")
    elif variant == "object-garbage" and not bare:
        data = dump(doc, rng) + rng.choice(GARBAGE)
        case.expecting(2, "text after the document is not JSON (issue 13, class 5)")
    elif variant == "trailing-whitespace":
        data = dump(doc, rng) + rng.choice((b"\n", b"\n\n\n", b"   \t\r\n", b" " * 5000))
        valid = True
    elif variant == "only-nested-traceEvents" and not bare:
        doc = {"schemaVersion": 1, rng.choice(("trace", "data", "deviceProperties")):
               {"traceEvents": events}}
        data = dump(doc, rng)
    elif variant == "traceEvents-not-list" and not bare:
        doc["traceEvents"] = rng.choice((None, {}, "events", 5, {"0": events[:1]}, True))
        data = dump(doc, rng)
    elif variant == "tiny-documents":
        data = rng.choice((b"", b" ", b"\n\n", b"{}", b"[]", b"null", b"[[]]", b"{ }",
                           b'{"traceEvents": []}', b'{"traceEvents": [{}]}', b'[{"ph": "X"}]',
                           b'{"schemaVersion": 1}', b'{"traceEvents": null}', b"0", b'""'))
    elif variant == "wrapped-in-array" and not bare:
        data = dump([doc], rng)
    elif variant == "nested-event-arrays":
        k = rng.randint(0, max(0, len(events) - 2))
        events[k:k + 2] = [events[k:k + 2]]
        data = dump(doc, rng)
    else:  # "styles", and variants that need an object given a bare array
        variant = "styles"
        data, valid = dump(doc, rng), True
    gz = rng.random() < 0.2
    case.variant = f"{variant} of {name}" + (" (gzip)" if gz else "")
    src = case.file(trace_name(rng, gz), compress(rng, data) if gz else data)
    if valid:
        case.expecting(0, "a valid trace (README: converts, every event kept)")
    command(rng, case, src)


def _dup_event_keys(rng: Random, doc: Any) -> bytes:
    """``doc`` with some event keys written twice, with the same value (no ambiguity)."""
    events = events_of(doc)
    raw = {}
    for k in rng.sample(range(len(events)), min(len(events), rng.randint(1, 5))):
        e = events[k]
        if not isinstance(e, dict) or not e:
            continue
        key = rng.choice(sorted(e))
        marker = RAW.format(len(raw))
        text = json.dumps(e, ensure_ascii=False)
        dup = json.dumps(key) + ": " + json.dumps(e[key], ensure_ascii=False)
        raw[marker] = (text[:-1] + (", " if len(e) else "") + dup + "}").encode(
            "utf-8", "surrogateescape")
        events[k] = marker
    return dump(doc, rng, raw)


# -- family: numbers

NUMBERS = (
    "0", "-0", "-1", "1.5", "0.0001", "1e3", "1E+2", "1e-7", "2.5e-3", "123.4567890123",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "340282366920938463463374607431768211455",
    "1e308", "-1e308", "1.7976931348623157e309", "1e400", "-1e400", "1e-400", "4e15", "1e18",
    "1.0e+18", "-9999999999999999999999.5", "5118349990281.5820000000001", "1.0",
    "0.000000000000000000000000001", "NaN", "Infinity", "-Infinity", "nan", "N/A", "01", "+1",
    ".5", "5.", "0x10", "1_000", "-", "true", "null", '"123"', '"1e400"', '""', '"abc"',
    '"-5"', "[1]", "{}", "0" * 30 + "1", "9" * 40, "9" * 5000,
)
#: Numbers that make an unguarded decimal-to-integer conversion run for minutes.
HUGE_NUMBERS = ("1e999999", "-1e999999", "1e999990", "1e-999999", "1e99999",
                "1" + "0" * 100_000)
EVENT_NUMBER_FIELDS = ("ts", "dur", "pid", "tid", "id")
ARGS_NUMBER_FIELDS = ("External id", "correlation", "device", "stream", "bytes",
                      "Ev Idx", "Record function id", "Sequence number", "Bytes")
HEADER_NUMBER_FIELDS = ("distributedInfo.rank", "distributedInfo.world_size",
                        "baseTimeNanoseconds", "schemaVersion", "displayTimeUnit",
                        "deviceProperties.totalGlobalMem", "trace_id")


def number(rng: Random) -> str:
    return rng.choice(HUGE_NUMBERS) if rng.random() < 0.005 else rng.choice(NUMBERS)


def numbers(rng: Random, case: Case) -> None:
    name, doc = fresh_doc(rng)
    events = events_of(doc)
    raw: dict[str, bytes] = {}
    done = []
    if rng.random() < 0.02:  # one huge exponent in a time (issue 13, class 4), alone
        e = rng.choice([e for e in events if isinstance(e, dict)] or [{}])
        field_ = rng.choice(("ts", "dur"))
        token = rng.choice(HUGE_NUMBERS)
        e[field_] = RAW.format(0)
        raw[RAW.format(0)] = token.encode()
        done.append(f"{field_}={_short(token)}")
    for _ in range(rng.randint(1, 3) if not done else 0):
        token = number(rng)
        marker = RAW.format(len(raw))
        where = rng.random()
        if where < 0.2 and isinstance(doc, dict):
            path = rng.choice(HEADER_NUMBER_FIELDS)
            head, _, leaf = path.partition(".")
            if leaf:
                holder = doc.get(head)
                if head == "deviceProperties":
                    if not isinstance(holder, list) or not holder or not isinstance(
                            holder[0], dict):
                        holder = doc[head] = [{}]
                    holder = holder[0]
                elif not isinstance(holder, dict):
                    holder = doc[head] = {}
                holder[leaf] = marker
            else:
                doc[head] = marker
        elif events:
            e = rng.choice(events)
            if not isinstance(e, dict):
                continue
            if rng.random() < 0.6:
                path = rng.choice(EVENT_NUMBER_FIELDS)
                e[path] = marker
            else:
                path = "args." + rng.choice(ARGS_NUMBER_FIELDS)
                if not isinstance(e.get("args"), dict):
                    e["args"] = {}
                e["args"][path[5:]] = marker
        else:
            continue
        raw[marker] = token.encode()
        done.append(f"{path}={_short(token)}")
    data = dump(doc, rng, raw)
    gz = rng.random() < 0.15
    src = case.file(trace_name(rng, gz) if isinstance(doc, dict) else "in/trace.json",
                    compress(rng, data) if gz else data)
    case.variant = f"{', '.join(done) or 'unchanged'} in {name}"
    command(rng, case, src)
    if case.argv[0] == "convert" and rng.random() < 0.1:
        token = number(rng)
        if "--rank" in case.argv:
            k = case.argv.index("--rank")
            del case.argv[k:k + 2]
        case.argv += ["--rank", token]
        case.variant += f"; --rank {_short(token)}"


def _short(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:8]}...({len(text)} chars)"


# -- family: encodings

def encodings(rng: Random, case: Case) -> None:
    name, doc = fresh_doc(rng)
    events = [e for e in events_of(doc) if isinstance(e, dict)]
    variant = rng.choice(("utf8-bom", "utf16le-bom", "utf16be-bom", "utf16le", "utf16be",
                          "utf32", "invalid-utf8-name", "invalid-utf8-cat",
                          "invalid-utf8-args", "lone-surrogate-escape", "surrogate-pair",
                          "control-characters", "nul-in-string", "crlf", "leading-whitespace",
                          "whitespace-before-first-key", "unicode-escapes", "non-ascii",
                          "invalid-utf8-key", "bom-and-gzip", "overlong-utf8"))
    valid = True
    raw: dict[str, bytes] = {}

    def put(field_: str, value: bytes, key: str | None = None) -> None:
        if not events:
            return
        e = rng.choice(events)
        marker = RAW.format(len(raw))
        raw[marker] = b'"' + value + b'"'
        if field_ == "args":
            if not isinstance(e.get("args"), dict):
                e["args"] = {}
            e["args"][key or rng.choice(("Python id", "note", "Input type"))] = marker
        else:
            e[field_] = marker

    bad = rng.choice((b"\xff", b"\xc3\x28", b"\xe9", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
                      b"\x80\x80", b"caf\xe9 \xff"))
    if variant.startswith("invalid-utf8-") and variant != "invalid-utf8-key":
        for _ in range(rng.randint(1, 3)):
            put(variant.rsplit("-", 1)[1], b"frame " + bad + b" <module>")
    elif variant == "invalid-utf8-key":
        put("args", b"v", key="fuzz-key")
        valid = False
    elif variant == "lone-surrogate-escape":
        put(rng.choice(("name", "cat", "args")),
            rng.choice((b"\\ud800", b"a\\udfffb", b"\\udc80\\ud800", b"x\\ud83d")))
    elif variant == "surrogate-pair":
        put(rng.choice(("name", "args")), b"\\ud83d\\ude00 ok")
    elif variant == "control-characters":
        put(rng.choice(("name", "cat", "args")),
            rng.choice((b"a\x01b", b"\x1b[0m", b"tab\there", b"line\nbreak", b"\x7f")))
    elif variant == "nul-in-string":
        put(rng.choice(("name", "args")), b"nul\x00here")
        valid = False
    elif variant == "unicode-escapes":
        put(rng.choice(("name", "args")), b"caf\\u00e9 \\u0000 \\u2028")
    elif variant == "non-ascii":
        put(rng.choice(("name", "cat", "args")),
            "ünïcødé ∑ 😀 \u200b".encode())
    elif variant == "overlong-utf8":
        put("name", b"\xc0\xaf\xe0\x80\xaf")
        valid = True  # invalid UTF-8 in name is kept (README)
    data = dump(doc, rng, raw)
    if variant == "invalid-utf8-key":
        data = data.replace(b'"fuzz-key"', b'"fuzz\xfekey"')
    if variant in ("utf8-bom", "bom-and-gzip"):
        data = b"\xef\xbb\xbf" + data
    elif variant.startswith("utf16"):
        text = data.decode("utf-8", "surrogateescape")
        codec = {"utf16le-bom": "utf-16", "utf16be-bom": "utf-16-be", "utf16le": "utf-16-le",
                 "utf16be": "utf-16-be"}[variant]
        data = text.encode(codec, "surrogatepass")
        if variant == "utf16be-bom":
            data = b"\xfe\xff" + data
    elif variant == "utf32":
        data = data.decode("utf-8", "surrogateescape").encode("utf-32", "surrogatepass")
        valid = False  # not promised; if converted, every event must be there
    elif variant == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif variant == "leading-whitespace":
        data = rng.choice((b" ", b"\n\n", b"\t \r\n", b" " * 5000, b"\n" * 3000)) + data
    elif variant == "whitespace-before-first-key":
        data = re.sub(rb"^\s*([\[{])", lambda m: m.group(1) + rng.choice(
            (b"   ", b"\n\n\n", b"\r\n\t", b" " * 6000)), data, count=1)
    gz = variant == "bom-and-gzip" or rng.random() < 0.15
    src = case.file(trace_name(rng, gz) if isinstance(doc, dict) else "in/trace.json",
                    compress(rng, data) if gz else data)
    case.variant = f"{variant} in {name}" + (" (gzip)" if gz else "")
    if valid:
        case.expecting(0, "valid or documented as kept (README; issue 13, class 6)")
    command(rng, case, src)


# -- family: truncation, byteflip

def base_bytes(rng: Random) -> tuple[str, bytes]:
    traces = raw_traces()
    name = rng.choice(sorted(traces))
    return name, traces[name]


def truncation(rng: Random, case: Case) -> None:
    name, data = base_bytes(rng)
    gz = rng.random() < 0.3
    if gz:
        data = compress(rng, data)
    n = len(data)
    at = rng.choice((rng.randrange(n + 1), rng.randrange(n + 1), n - rng.randint(0, 40),
                     rng.randint(0, 40), n - 1))
    at = max(0, min(n, at))
    case.variant = f"{name}{' (gzip)' if gz else ''} cut at byte {at} of {n}"
    src = case.file(trace_name(rng, gz) if not data.lstrip().startswith(b"[") else
                    "in/trace.json", data[:at])
    command(rng, case, src)


def byteflip(rng: Random, case: Case) -> None:
    name, data = base_bytes(rng)
    gz = rng.random() < 0.2
    if gz:
        data = compress(rng, data)
    b = bytearray(data)
    what = []
    for _ in range(rng.randint(1, 8)):
        if not b:
            break
        at = rng.randrange(len(b))
        op = rng.choice(("set", "bit", "insert", "delete", "json"))
        if op == "set":
            b[at] = rng.randrange(256)
        elif op == "bit":
            b[at] ^= 1 << rng.randrange(8)
        elif op == "insert":
            b[at:at] = bytes([rng.randrange(256)])
        elif op == "delete":
            del b[at]
        else:
            b[at] = ord(rng.choice('{}[]",:\\-.eE0 '))
        what.append(f"{op}@{at}")
    case.variant = f"{name}{' (gzip)' if gz else ''}: {' '.join(what)}"
    src = case.file(trace_name(rng, gz) if not data.lstrip().startswith(b"[") else
                    "in/trace.json", bytes(b))
    command(rng, case, src)


# -- family: events

ODD_VALUES: tuple[Any, ...] = (None, True, False, "", "x", "123", "1.5", -1, 0, 2**70, -(2**70),
                               1.5e300, [], [1, 2], {}, {"a": 1}, [[]], "N/A", "\u0000")
ODD_PH = ("", "x", "XX", "B", "E", "b", "e", "n", "O", "N", "D", "P", "R", "c", "(", "\u0000",
          "M", "s", "f", "t", "X ", "x", "i", "I", "C")
EVENT_FIELDS = ("ph", "ts", "dur", "pid", "tid", "name", "cat", "args", "id", "bp", "s")


def nested(depth: int, rng: Random) -> bytes:
    """A value nested ``depth`` levels deep, as text."""
    kind = rng.choice(("object", "array", "mixed"))
    if kind == "array":
        return b"[" * depth + b"1" + b"]" * depth
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b'[{"a":' * (depth // 2) + b"1" + b"}]" * (depth // 2)


def events(rng: Random, case: Case) -> None:
    name, doc = fresh_doc(rng)
    evs = events_of(doc)
    raw: dict[str, bytes] = {}
    done = []
    only_reordered = True
    for _ in range(rng.randint(1, 4)):
        dicts = [e for e in evs if isinstance(e, dict)]
        op = rng.choice(("field-type", "missing", "array-for-number", "deep-args", "dup-reorder",
                         "odd-ph", "non-object", "args-not-object", "flow-odd", "meta-odd",
                         "long-string", "dup-reorder"))
        if op != "dup-reorder":
            only_reordered = False
        if op == "dup-reorder":
            for _ in range(rng.randint(1, 20)):
                if evs:
                    evs.insert(rng.randrange(len(evs) + 1), rng.choice(evs))
            rng.shuffle(evs)
            done.append(op)
            continue
        if op == "non-object":
            evs.insert(rng.randrange(len(evs) + 1), rng.choice((1, "x", None, [], True, 1.5)))
            done.append(op)
            continue
        if not dicts:
            continue
        e = rng.choice(dicts)
        if op == "field-type":
            f = rng.choice(EVENT_FIELDS)
            e[f] = rng.choice(ODD_VALUES)
            done.append(f"{f}={_short(repr(e[f]))}")
        elif op == "missing":
            f = rng.choice(EVENT_FIELDS)
            e.pop(f, None)
            done.append(f"no {f}")
        elif op == "array-for-number":
            f = rng.choice(("ts", "dur", "pid", "tid", "id"))
            e[f] = rng.choice(([1, 2], [], [[1]], [1.5], {"v": 1}))
            done.append(f"{f}={e[f]!r}")
        elif op == "deep-args":
            depth = rng.choice((10, 100, 1000, 3000, 20_000)) if rng.random() > 0.06 \
                else 100_000
            marker = RAW.format(len(raw))
            raw[marker] = nested(depth, rng)
            if rng.random() < 0.7:
                if not isinstance(e.get("args"), dict):
                    e["args"] = {}
                e["args"]["deep"] = marker
            else:
                e[rng.choice(("args", "name", "ts"))] = marker
            done.append(f"nesting {depth}")
        elif op == "odd-ph":
            e["ph"] = rng.choice(ODD_PH)
            done.append(f"ph={e['ph']!r}")
        elif op == "args-not-object":
            e["args"] = rng.choice(([1, 2], "str", 5, None, True, [{"External id": 1}]))
            done.append(f"args={e['args']!r}")
        elif op == "flow-odd":
            e.update(ph=rng.choice(("s", "f", "t")), id=rng.choice(ODD_VALUES),
                     cat=rng.choice(("ac2g", "fwdbwd", None, 5)))
            if rng.random() < 0.5:
                e["bp"] = rng.choice(("e", "x", None, 1))
            done.append(f"flow id={_short(repr(e['id']))}")
        elif op == "meta-odd":
            e.update(ph="M", name=rng.choice(("thread_name", "process_name", "process_labels",
                                              "thread_sort_index", None, 5)),
                     args=rng.choice(({"name": 5}, {"name": None}, {"labels": []}, {},
                                      {"sort_index": "x"}, None, {"name": "ok"})))
            done.append(f"M {e['name']!r} args={e['args']!r}")
        elif op == "long-string":
            f = rng.choice(("name", "cat"))
            e[f] = rng.choice(("n", "\u00e9", "\\")) * rng.choice((10_000, 300_000))
            done.append(f"long {f}")
    data = dump(doc, rng, raw)
    gz = rng.random() < 0.15
    src = case.file(trace_name(rng, gz) if isinstance(doc, dict) else "in/trace.json",
                    compress(rng, data) if gz else data)
    case.variant = f"{'; '.join(done) or 'unchanged'} in {name}"
    if only_reordered and done:
        case.expecting(0, "events duplicated and reordered: a valid trace")
    command(rng, case, src)


# -- family: gzip

def gzip_family(rng: Random, case: Case) -> None:
    name, doc = fresh_doc(rng, "object")
    variant = rng.choice(("valid", "truncated", "mutated", "whitespace-bomb", "string-bomb",
                          "events-bomb", "multi-member", "trailing-garbage", "double", "empty",
                          "valid-named-json", "header-only", "truncated"))
    valid = False
    if variant in ("valid", "valid-named-json"):
        data, valid = compress(rng, dump(doc, rng)), True
    elif variant == "truncated":
        full = compress(rng, dump(doc, rng))
        at = rng.randrange(len(full))
        data = full[:at]
        variant += f" at {at} of {len(full)}"
    elif variant == "mutated":
        plain = bytearray(dump(doc, rng))
        for _ in range(rng.randint(1, 4)):
            plain[rng.randrange(len(plain))] = rng.randrange(256)
        data = compress(rng, bytes(plain))
    elif variant == "whitespace-bomb":
        size = rng.choice((1 << 20, 8 << 20, 32 << 20))
        where = rng.choice(("between-events", "before-array", "after-document", "inside-event"))
        text = dump(doc, None)
        pad = rng.choice((b" ", b"\n", b"\t", b"\r\n")) * (size // 2)
        if where == "before-array":
            text = text.replace(b'"traceEvents": [', b'"traceEvents": ' + pad + b"[", 1)
        elif where == "after-document":
            text += pad
        elif where == "inside-event":
            text = text.replace(b'"ph":', b'"ph":' + pad, 1)
        else:
            text = text.replace(b"},", b"}," + pad, 1)
        data = compress(rng, text)
        variant += f" {size >> 20} MiB {where}"
        valid = True
    elif variant == "string-bomb":
        size = rng.choice((1 << 20, 8 << 20, 24 << 20))
        evs = events_of(doc)
        target = next((e for e in evs if isinstance(e, dict)), None)
        if target is not None:
            target["name"] = "a" * size
        data = compress(rng, dump(doc, None))
        variant += f" {size >> 20} MiB name"
    elif variant == "events-bomb":
        evs = [e for e in events_of(doc) if isinstance(e, dict)]
        count = rng.choice((2_000, 8_000, 20_000))
        if evs:
            texts = [json.dumps(e, ensure_ascii=False).encode("utf-8", "surrogateescape")
                     for e in evs]
            count = min(count, (12 << 20) // (sum(map(len, texts)) // len(texts) + 2))
            body = b",\n".join(texts[k % len(texts)] for k in range(count))
            doc["traceEvents"] = RAW.format(0)
            data = compress(rng, dump(doc, None, {RAW.format(0): b"[" + body + b"]"}))
        else:
            data = compress(rng, dump(doc, None))
        variant += f" {count} events"
        valid = True
    elif variant == "multi-member":
        text = dump(doc, rng)
        cut = rng.randrange(len(text))
        data = compress(rng, text[:cut]) + compress(rng, text[cut:])
        valid = True
    elif variant == "trailing-garbage":
        data = compress(rng, dump(doc, rng)) + rng.choice((b"\x00" * 8, b"junk", b"\x1f\x8b"))
    elif variant == "double":
        data = compress(rng, compress(rng, dump(doc, rng)))
    elif variant == "empty":
        data = compress(rng, rng.choice((b"", b" ", b"{}")))
    else:  # header-only: the events array never starts
        data = compress(rng, b'{"schemaVersion": 1, "deviceProperties": [], "traceEvents": ')
    case.variant = f"{variant} of {name}"
    path = "in/trace.json" if variant == "valid-named-json" else trace_name(rng, True)
    src = case.file(path, data)
    if valid:
        case.expecting(0, "a valid gzip of a valid trace")
    command(rng, case, src)


# -- family: file-system situations

#: File-system variants and their weights: a FIFO costs the whole time limit for as long
#: as it blocks, and a large file a second or two, so those are rarer.
FS_VARIANTS = {
    "folder-mixed": 8, "folder-hidden-only": 3, "folder-dangling-symlink": 4,
    "folder-looping-symlink": 4, "folder-dir-loop": 3, "fifo-input": 1, "fifo-in-folder": 1,
    "empty-input": 3, "out-is-input": 6, "out-inside-input": 4, "out-contains-input": 3,
    "out-alias-of-input": 5, "out-existing-folder": 4, "out-parent-is-file": 4,
    "read-only-out": 3, "long-input-name": 3, "long-output-name": 3, "newline-in-name": 3,
    "same-input-twice": 3, "out-device-node": 3, "input-empty-folder": 2, "input-missing": 2,
    "input-symlink": 3, "unreadable-input": 2, "out-trailing-slash": 3, "large-plain": 0.2,
}


def filesystem(rng: Random, case: Case) -> None:
    variant = rng.choices(list(FS_VARIANTS), weights=list(FS_VARIANTS.values()))[0]
    case.variant = variant
    name, doc = fresh_doc(rng, "object")
    trace = dump(doc, rng)
    good = "a valid trace"
    if variant in ("folder-mixed", "folder-dangling-symlink", "folder-looping-symlink",
                   "folder-dir-loop", "fifo-in-folder"):
        traces = _folder(rng, case, "in/run")
        if variant == "folder-dangling-symlink":
            case.entries.append(Entry("in/run/broken.json", "symlink", target="missing.json"))
            case.expecting(0, "a dangling symlink in a folder is skipped (issue 13, class 9)")
        elif variant == "folder-looping-symlink":
            if rng.random() < 0.5:
                case.entries.append(Entry("in/run/loop.json", "symlink", target="loop.json"))
            else:
                case.entries.append(Entry("in/run/a.json", "symlink", target="b.json"))
                case.entries.append(Entry("in/run/b.json", "symlink", target="a.json"))
            case.expecting(0, "a looping symlink in a folder is skipped (issue 13, class 9)")
        elif variant == "folder-dir-loop":
            case.entries.append(Entry("in/run/sub/again", "symlink",
                                      target=rng.choice(("..", ".", "../.."))))
        elif variant == "fifo-in-folder":
            case.entries.append(Entry("in/run/pipe.json", "fifo"))
        else:
            case.expecting(0, "a folder of traces and other files")
        case.argv = ["convert", "{C}/in/run", "{C}/out"]
        case.outputs, case.rows_at, case.counted = ["out"], "out", traces
        if rng.random() < 0.2:
            case.argv = [rng.choice(("ops", "gaps", "steps", "copies")), "{C}/in/run"]
            case.outputs, case.rows_at, case.counted = [], None, []
        return
    if variant == "folder-hidden-only":
        case.file("in/run/.hidden.json", trace)
        case.file("in/run/.cache/trace.json", trace)
        case.argv = ["convert", "{C}/in/run", "{C}/out"]
        case.outputs = ["out"]
        case.expecting(2, "a folder with only hidden files holds no trace")
        return
    if variant in ("fifo-input", "empty-input", "input-empty-folder", "input-missing"):
        src = "in/trace.json"
        if variant == "fifo-input":
            case.entries.append(Entry(src, "fifo"))
        elif variant == "empty-input":
            case.file(src, b"")
        elif variant == "input-empty-folder":
            src = "in/empty"
            case.entries.append(Entry(src, "dir"))
        command(rng, case, src, counted=False)
        case.expecting(2, f"{variant}: no trace to read")
        return
    src = case.file("in/trace.json", trace)
    if variant == "out-is-input":
        form = rng.choice(("convert", "convert-dir", "export", "report-html"))
        case.variant += f" ({form})"
        if form == "convert":
            case.argv = ["convert", f"{{C}}/{src}", f"{{C}}/{src}"]
        elif form == "export":
            case.argv = ["export", f"{{C}}/{src}", f"{{C}}/{src}"]
        elif form == "report-html":
            case.argv = ["report", f"{{C}}/{src}", "--html", f"{{C}}/{src}"]
        else:
            case.file("in/run/t.json", trace)
            case.argv = ["convert", "{C}/in/run", "{C}/in/run"]
        case.expecting(2, "the output is the input (issue 13, class 1)")
    elif variant == "out-inside-input":
        case.file("in/run/t.json", trace)
        case.argv = ["convert", "{C}/in/run", rng.choice(("{C}/in/run/out", "{C}/in/run/o.pq",
                                                          "{C}/in/run/sub/out"))]
        case.expecting(2, "the output lies inside the input (issue 13, class 1)")
    elif variant == "out-contains-input":
        case.argv = ["convert", f"{{C}}/{src}", "{C}/in"]
        case.expecting(2, "the output contains the input (issue 13, class 1)")
    elif variant == "out-alias-of-input":
        form = rng.choice(("symlink", "hardlink", "dot-path", "dotdot-path"))
        case.variant += f" ({form})"
        if form == "symlink":
            case.entries.append(Entry("in/alias.json", "symlink", target="trace.json"))
            out = "{C}/in/alias.json"
        elif form == "hardlink":
            case.entries.append(Entry("in/alias.json", "hardlink", target=src))
            out = "{C}/in/alias.json"
        elif form == "dot-path":
            out = "{C}/in/./trace.json"
        else:
            case.entries.append(Entry("in/x", "dir"))
            out = "{C}/in/x/../trace.json"
        cmd = rng.choice(("convert", "export"))
        case.argv = [cmd, f"{{C}}/{src}", out]
        case.expecting(2, "the output is the input under another name (issue 13, class 1)")
    elif variant == "out-existing-folder":
        case.entries.append(Entry("out", "dir"))
        case.replaceable.append("out")
        case.argv = ["convert", f"{{C}}/{src}", "{C}/out"]
        case.outputs, case.rows_at, case.counted = ["out"], "out", [src]
    elif variant == "out-parent-is-file":
        case.file("afile", b"user data\n")
        case.argv = [rng.choice(("convert", "export")), f"{{C}}/{src}",
                     "{C}/afile/out.parquet"]
        case.expecting(2, "the output's parent is a file")
    elif variant == "read-only-out":
        case.entries.append(Entry("ro", "dir"))
        case.readonly.append("ro")
        case.argv = ["convert", f"{{C}}/{src}", "{C}/ro/out.parquet"]
        case.expecting(2, "the output folder is read-only")
        if os.geteuid() == 0:
            case.needs = "running as root: permission bits do not stop writes"
    elif variant == "long-input-name":
        long = "in/" + "a" * 250 + ".json"
        case.entries.pop()
        src = case.file(long, trace)
        command(rng, case, src)
        case.expecting(0, "a legal 255-byte file name")
    elif variant == "long-output-name":
        out = "out/" + "b" * 247 + ".parquet"
        case.argv = ["convert", f"{{C}}/{src}", f"{{C}}/{out}"]
        case.outputs, case.rows_at, case.counted = [out], out, [src]
    elif variant == "newline-in-name":
        case.entries.pop()
        src = case.file("in/bad\nname.json", trace[: len(trace) // 2])
        command(rng, case, src)
        case.expecting(2, "a truncated trace")
    elif variant == "same-input-twice":
        case.argv = ["convert", f"{{C}}/{src}", f"{{C}}/{src}", "{C}/out"]
        case.outputs, case.rows_at, case.counted = ["out"], "out", [src]
    elif variant == "out-device-node":
        case.entries.append(Entry("out/null", "device"))
        case.argv = ["convert", f"{{C}}/{src}", "{C}/out/null"]
        case.expecting(2, "the output is a device node (issue 13, class 1)")
    elif variant == "input-symlink":
        case.entries.append(Entry("in/link.json", "symlink", target="trace.json"))
        command(rng, case, "in/link.json")
        case.counted = ["in/trace.json"] if case.counted else []
        case.expecting(0, good)
    elif variant == "unreadable-input":
        case.entries[-1].mode = 0
        command(rng, case, src, counted=False)
        case.expecting(2, "an unreadable input")
        if os.geteuid() == 0:
            case.needs = "running as root: permission bits do not stop reads"
    elif variant == "out-trailing-slash":
        case.argv = ["convert", f"{{C}}/{src}", "{C}/out/"]
        case.outputs, case.rows_at, case.counted = ["out"], "out", [src]
    elif variant == "large-plain":
        case.entries.pop()
        src = case.file("in/trace.json", _large(doc, 34 << 20))
        case.argv = ["convert", f"{{C}}/{src}", "{C}/out/trace.parquet"]
        case.outputs, case.rows_at, case.counted = ["out/trace.parquet"], "out/trace.parquet", [src]
        case.expecting(0, "a large valid trace (decoded in parallel)")
        case.fresh = True
    case.variant += f" [{name}]"


def _folder(rng: Random, case: Case, root: str) -> list[str]:
    """A folder of traces and other files; returns the traces a convert must read."""
    traces = []
    for k in range(rng.randint(1, 3)):
        name, doc = fresh_doc(rng)
        data = dump(doc, rng)
        gz = rng.random() < 0.3
        where = f"{root}/{'sub/' if k == 2 else ''}rank_{k}.json" + (".gz" if gz else "")
        traces.append(case.file(where, compress(rng, data) if gz else data))
    for extra in rng.sample(("README.txt", ".hidden.json", "empty.json", "notes.md",
                             ".git/config", "data.bin"), rng.randint(1, 4)):
        content = {"README.txt": b"not a trace\n", ".hidden.json": dump(fresh_doc(rng)[1]),
                   "empty.json": b"", "notes.md": b"# notes\n", ".git/config": b"[core]\n",
                   "data.bin": bytes(range(256))}[extra]
        case.file(f"{root}/{extra}", content)
    return traces


def _large(doc: Any, size: int) -> bytes:
    """A plain trace of about ``size`` bytes: ``doc``'s events repeated, each with 4 KiB
    more of ``args`` (few events: the case is about the file's size)."""
    evs = [e for e in events_of(doc) if isinstance(e, dict)] or [
        {"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}]
    for e in evs:
        e["args"] = {**(e["args"] if isinstance(e.get("args"), dict) else {}), "pad": "p" * 4096}
    texts = [json.dumps(e, ensure_ascii=False).encode("utf-8", "surrogateescape") for e in evs]
    block = b",\n".join(texts)
    body = b",\n".join([block] * max(1, size // (len(block) + 2)))
    doc = {k: v for k, v in doc.items() if k != "traceEvents"}
    doc["traceEvents"] = RAW.format(0)
    return dump(doc, None, {RAW.format(0): b"[\n" + body + b"\n]"})


# -- families: Explorer Parquet, event-table Parquet

TYPES = ("string", "int32", "int64", "uint64", "float64", "float32", "bool", "timestamp",
         "list<int64>", "list<string>", "binary", "null", "dictionary", "struct", "decimal",
         "large_string", "date32", "duration")


def _typed(values: list[Any], kind: str) -> Any:
    """``values`` as an Arrow array of ``kind`` (converted where they can be, else null)."""
    import pyarrow as pa

    def num(v: Any, f: Callable[[Any], Any]) -> Any:
        try:
            return None if v is None else f(v)
        except (TypeError, ValueError, OverflowError):
            return None

    as_int = [num(v, lambda v: int(float(v)) if isinstance(v, str) else int(v)) for v in values]
    types: dict[str, tuple[Any, Callable[[], list[Any]]]] = {
        "string": (pa.string(), lambda: [None if v is None else str(v) for v in values]),
        "large_string": (pa.large_string(), lambda: [None if v is None else str(v)
                                                     for v in values]),
        "int32": (pa.int32(), lambda: [None if v is None else (v + 2**31) % 2**32 - 2**31
                                       for v in as_int]),
        "int64": (pa.int64(), lambda: [None if v is None else (v + 2**63) % 2**64 - 2**63
                                       for v in as_int]),
        "uint64": (pa.uint64(), lambda: [None if v is None else v % 2**64 for v in as_int]),
        "float64": (pa.float64(), lambda: [num(v, float) for v in values]),
        "float32": (pa.float32(), lambda: [num(v, float) for v in values]),
        "bool": (pa.bool_(), lambda: [None if v is None else bool(v) for v in values]),
        "timestamp": (pa.timestamp("ns"), lambda: [None if v is None else v % 2**62
                                                   for v in as_int]),
        "duration": (pa.duration("ns"), lambda: [None if v is None else v % 2**62
                                                 for v in as_int]),
        "date32": (pa.date32(), lambda: [None if v is None else v % 100_000 for v in as_int]),
        "list<int64>": (pa.list_(pa.int64()), lambda: [None if v is None else
                                                       [v % 2**62, -1] for v in as_int]),
        "list<string>": (pa.list_(pa.string()), lambda: [None if v is None else [str(v)]
                                                         for v in values]),
        "binary": (pa.binary(), lambda: [None if v is None else str(v).encode() + b"\xff"
                                         for v in values]),
        "struct": (pa.struct([("a", pa.int64())]), lambda: [
            None if v is None else {"a": v % 2**62} for v in as_int]),
        "decimal": (pa.decimal128(38, 3), lambda: [None if v is None else v % 10**30
                                                   for v in as_int]),
    }
    if kind == "null":
        return pa.nulls(len(values))
    if kind == "dictionary":
        return pa.array([None if v is None else str(v) for v in values],
                        pa.string()).dictionary_encode()
    typ, make = types[kind]
    try:
        return pa.array(make(), typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return pa.nulls(len(values), typ)


JSON_ODD = ("{", "[]", "null", '{"exec_id": 1e999999}', '{"size": "x"}', '{"exec_id": [1]}',
            '{"a": ' * 5000 + "1" + "}" * 5000, '{"bytes": -1}', '"\\ud800"', "NaN", '""',
            '{"device_ts": 1e400}', '{"exec_id": 340282366920938463463374607431768211455}')
VERSIONS = ("abc", "", "999.0.0", "7", "12.1", "-1.0.0", "1e400.0.0", "12.1.0.extra", None)


def mutate_table(rng: Random, data: bytes, what: list[str]) -> bytes:
    """One Parquet file, mutated at the table level (types, columns, values) or the byte
    level (truncated, flipped, emptied, replaced). A file that is no longer a readable
    table gets a byte-level mutation."""
    import pyarrow as pa

    op = rng.choice(("cast", "cast", "drop", "rename", "nulls", "extremes", "truncate", "flip",
                     "empty-file", "not-parquet", "json-field", "duplicate-rows", "no-rows",
                     "version", "duplicate-column", "metadata"))
    if op not in ("truncate", "flip", "empty-file", "not-parquet"):
        try:
            return _mutate_rows(rng, op, data, what)
        except (pa.ArrowException, OSError, KeyError, ValueError):
            op = rng.choice(("truncate", "flip", "not-parquet"))
    if op == "truncate" and data:
        at = rng.randrange(len(data))
        what.append(f"truncated at {at}")
        return data[:at]
    if op == "flip" and data:
        b = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        what.append("bytes flipped")
        return bytes(b)
    if op == "empty-file":
        what.append("empty file")
        return b""
    what.append("not Parquet")
    return rng.choice((b"PAR1", b"hello", b"PAR1" + b"\x00" * 64 + b"PAR1", data[::-1]))


def _mutate_rows(rng: Random, op: str, data: bytes, what: list[str]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    names = table.column_names
    meta = table.schema.metadata
    if not names:
        what.append("(no columns)")
        return data
    col = rng.choice(names)
    values = table.column(col).to_pylist()
    if op == "cast":
        kind = rng.choice(TYPES)
        table = table.set_column(names.index(col), col, _typed(values, kind))
        what.append(f"{col} as {kind}")
    elif op == "drop":
        table = table.drop_columns([col])
        what.append(f"no {col}")
    elif op == "rename":
        new = rng.choice((col.upper(), col + "_x", "", " " + col, "row"))
        table = table.rename_columns([new if n == col else n for n in names])
        what.append(f"{col} renamed {new!r}")
    elif op == "nulls":
        n = len(values)
        keep = [v if rng.random() < 0.5 else None for v in values] if n else values
        table = table.set_column(names.index(col), col,
                                 pa.array(keep if rng.random() < 0.5 else [None] * n,
                                          table.schema.field(col).type))
        what.append(f"nulls in {col}")
    elif op == "extremes":
        typ = table.schema.field(col).type
        if pa.types.is_integer(typ):
            pool = (2**63 - 1, -(2**63), 0, -1) if pa.types.is_signed_integer(typ) else (
                2**64 - 1, 0)
        elif pa.types.is_floating(typ):
            pool = (float("nan"), float("inf"), -1e308, 0.0)
        elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
            pool = ("", "x" * 100_000, "\x00", "ünï", "\n")
        else:
            pool = (None,)
        new = [rng.choice(pool) for _ in values]
        try:
            table = table.set_column(names.index(col), col, pa.array(new, typ))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        what.append(f"extreme {col}")
    elif op == "json-field":
        target = next((n for n in names if "json" in n or n in ("args", "trace")), col)
        new = [rng.choice(JSON_ODD) for _ in range(table.num_rows)]
        table = table.set_column(names.index(target), target, pa.array(new, pa.string()))
        what.append(f"odd JSON in {target}")
    elif op == "duplicate-rows":
        table = pa.concat_tables([table, table])
        what.append("rows twice")
    elif op == "no-rows":
        table = table.slice(0, 0)
        what.append("no rows")
    elif op == "version":
        target = next((n for n in names if "version" in n), None)
        value = rng.choice(VERSIONS)
        if target:
            table = table.set_column(names.index(target), target,
                                     pa.array([value] * table.num_rows, pa.string()))
            what.append(f"{target}={value!r}")
        meta = dict(meta or {})
        meta[b"neurontrace.schema_version"] = str(value).encode()
        what.append("schema_version")
    elif op == "duplicate-column":
        table = table.append_column(col, table.column(col))
        what.append(f"{col} twice")
    elif op == "metadata":
        meta = dict(meta or {})
        key = rng.choice((b"neurontrace.trace", b"neurontrace.source", b"neurontrace.clock",
                          b"neurontrace.warnings", b"neurontrace.schema_version"))
        meta[key] = rng.choice((b"{", b"null", b"[]", b"\xff\xfe", b'{"a": 1e999999}',
                                b'"x"' * 1000))
        what.append(f"metadata {key.decode()}")
    if op not in ("version", "metadata"):
        meta = table.schema.metadata or meta
    table = table.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def explorer(rng: Random, case: Case) -> None:
    dirs = explorer_dirs()
    name = rng.choice(sorted(dirs))
    files = dict(dirs[name])
    what: list[str] = []
    mutations = rng.choice((0, 1, 1, 1, 2, 2, 3))
    for _ in range(mutations):
        fname = rng.choice(sorted(files))
        what.append(fname.removesuffix(".parquet") + ":")
        files[fname] = mutate_table(rng, files[fname], what)
    if rng.random() < 0.1:
        extra = rng.choice(("Instruction_7.parquet", "Unknown.parquet", "DmaPacket.parquet",
                            "SystemProfileEvents_1.parquet"))
        files.setdefault(extra, rng.choice(sorted(files.values())))
        what.append(f"+{extra}")
    root = "in/" + rng.choice(("explorer", "rmsnorm@latest", "profile"))
    for fname, data in sorted(files.items()):
        case.file(f"{root}/{fname}", data)
    case.variant = f"{name}: {' '.join(what) or 'unchanged'}"
    command(rng, case, root, counted=False, analyses=0.3)
    if not mutations and len(what) == 0:
        case.expecting(0, "an Explorer folder as the fixture has it")


def parquet_family(rng: Random, case: Case) -> None:
    tables = event_tables()
    name = rng.choice(sorted(tables))
    data = tables[name]
    what: list[str] = []
    form = rng.choice(("event-table", "event-table", "event-table", "foreign"))
    if form == "foreign":
        data = _foreign(rng)
        what.append("a foreign Parquet table")
    else:
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            data = mutate_table(rng, data, what)
    src = case.file(rng.choice(("in/trace.parquet", "in/run/rank=0/trace.parquet")), data)
    arg = src if "rank=" not in src or rng.random() < 0.5 else "in/run"
    pick = rng.randrange(len(ANALYSES) + 3)
    if pick < len(ANALYSES):
        case.argv = [*ANALYSES[pick], f"{{C}}/{arg}"]
    elif pick == len(ANALYSES):
        case.argv = ["export", f"{{C}}/{arg}", "{C}/export.json"]
        case.outputs.append("export.json")
    elif pick == len(ANALYSES) + 1:
        case.argv = ["report", f"{{C}}/{arg}", "--html", "{C}/report.html"]
        case.outputs.append("report.html")
    else:
        other = case.file("in/b.parquet", tables[rng.choice(sorted(tables))])
        case.argv = ["compare", f"{{C}}/{arg}", f"{{C}}/{other}"]
    case.variant = f"{name}: {' '.join(what) or 'unchanged'} -> {case.argv[0]}"
    if not what:
        case.expecting(0, "what convert wrote, unchanged")


def _foreign(rng: Random) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = rng.randint(0, 20)
    cols = {}
    for k in range(rng.randint(1, 6)):
        kind = rng.choice(TYPES)
        name = rng.choice(("name", "start_ns", "dur_ns", "row", "x", "layer", "kind", "rank",
                           f"c{k}"))
        cols[name] = _typed([rng.randint(-5, 10**6) for _ in range(n)], kind)
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    return buf.getvalue()


GENERATORS: dict[str, Callable[[Random, Case], None]] = {
    "structure": structure, "numbers": numbers, "encodings": encodings,
    "truncation": truncation, "byteflip": byteflip, "events": events, "gzip": gzip_family,
    "filesystem": filesystem, "explorer": explorer, "parquet": parquet_family,
}


# ----------------------------------------------------------------------------- running


def materialize(case: Case, folder: Path) -> None:
    """Write ``case``'s entries under ``folder``; raises OSError where this machine
    cannot make one (a device node without the privilege)."""
    for e in case.entries:
        p = folder / e.path
        p.parent.mkdir(parents=True, exist_ok=True)
        if e.kind == "file":
            p.write_bytes(e.data)
        elif e.kind == "dir":
            p.mkdir(exist_ok=True)
        elif e.kind == "symlink":
            os.symlink(e.target, p)
        elif e.kind == "hardlink":
            os.link(folder / e.target, p)
        elif e.kind == "fifo":
            os.mkfifo(p)
        elif e.kind == "device":
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for e in case.entries:  # modes last (a folder's mode may forbid writing into it)
        if e.mode is not None:
            os.chmod(folder / e.path, e.mode)
    for d in case.readonly:
        os.chmod(folder / d, 0o555)


def snapshot(folder: Path, paths: Iterable[str]) -> dict[str, tuple[Any, ...]]:
    """What each input is: relative path -> (type, mode, content hash / link target /
    device), for every path under the given ones; nothing is opened but regular files."""
    out: dict[str, tuple[Any, ...]] = {}
    for rel in paths:
        for p in _walk(folder / rel):
            try:
                st = os.lstat(p)
            except OSError:
                continue
            key = str(p.relative_to(folder))
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISREG(st.st_mode):
                h = hashlib.blake2b(digest_size=16)
                try:
                    with open(p, "rb") as f:
                        for block in iter(lambda f=f: f.read(1 << 20), b""):
                            h.update(block)
                    digest = h.hexdigest()
                except OSError as err:  # unreadable (not root)
                    digest = f"unreadable {err.errno}"
                out[key] = ("file", mode, digest, st.st_ino)
            elif stat.S_ISLNK(st.st_mode):
                out[key] = ("symlink", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[key] = ("dir", mode)
            else:
                out[key] = (stat.S_IFMT(st.st_mode), mode, st.st_rdev)
    return out


def _walk(p: Path) -> Iterator[Path]:
    """``p`` and, if it is a real folder (not a link), everything under it."""
    yield p
    if p.is_dir() and not p.is_symlink():
        try:
            children = sorted(p.iterdir())
        except OSError:
            return
        for q in children:
            yield from _walk(q)


def _diff(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> str | None:
    for k in sorted(before.keys() | after.keys()):
        if k not in after:
            return f"{k}: removed"
        if k not in before:
            return f"{k}: appeared inside an input"
        if before[k] != after[k]:
            b, a = before[k], after[k]
            if b[0] != a[0]:
                return f"{k}: {b[0]} became {a[0]}"
            if b[0] == "file" and b[2] != a[2]:
                return f"{k}: content changed"
            return f"{k}: {b} became {a}"
    return None


class Unbounded(BaseException):
    """Raised by the timer in the case's thread (not an Exception: nothing may catch it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Unbounded()


@dataclass
class Ran:
    code: int | None
    stdout: str = ""
    stderr: str = ""
    escaped: str | None = None
    timed_out: bool = False
    seconds: float = 0.0
    native: str = ""  # what native code wrote to file descriptor 2 meanwhile


class Fd2:
    """Collects what is written to file descriptor 2 itself while active: native code
    (a Rust panic's backtrace, a C++ warning) writes there, past ``sys.stderr``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.text = ""

    def __enter__(self) -> Fd2:
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.file = open(self.path, "w+b")  # noqa: SIM115 - closed in __exit__
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read(1 << 16).decode("utf-8", "replace")
        self.file.close()
        self.path.unlink(missing_ok=True)


def invoke(argv: list[str], limit: float, capture: Path) -> Ran:
    """``neurontrace ARGV`` through click's runner, in this process, under a timer;
    ``capture`` is a scratch file for what goes to file descriptor 2."""
    from click.testing import CliRunner

    from neurontrace.cli.main import cli

    runner = CliRunner()
    t0 = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)
    with Fd2(capture) as fd2:
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            try:
                r = runner.invoke(cli, argv, catch_exceptions=True)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            ran = Ran(r.exit_code, r.stdout, r.stderr)
        except Unbounded:
            ran = Ran(None, timed_out=True)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # escaped the error boundary (e.g. a Rust panic)
            ran = Ran(None, escaped=f"{type(e).__name__}: {_line(str(e))}")
    ran.native = fd2.text
    ran.seconds = time.monotonic() - t0
    return ran


@dataclass
class Outcome:
    number: int
    family: str
    variant: str
    check: str  # "ok", "skipped", or the first check that failed
    excerpt: str = ""
    seconds: float = 0.0
    command: str = ""
    exit: int | None = None
    others: list[str] = field(default_factory=list)  # further checks that failed

    @property
    def failed(self) -> bool:
        return self.check not in ("ok", "skipped")


def _line(text: str, width: int = 200) -> str:
    """``text`` on one line: its first line, and its last where it has several."""
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    one = " ⏎ ".join([lines[0], lines[-1]] if len(lines) > 1 else lines)
    return one if len(one) <= width else one[: width - 3] + "..."


def shown(argv: list[str], folder: str) -> str:
    """A command line as one shell line, ``{C}`` written as ``folder``."""
    import shlex

    return "neurontrace " + " ".join(shlex.quote(a.replace("{C}", folder)) for a in argv)


def run_case(case: Case, base: Path, limit: float = LIMIT_S) -> Outcome:
    """Run ``case`` in a fresh folder under ``base`` and check it."""
    out = Outcome(case.number, case.family, case.variant, "ok",
                  command=shown(case.argv, "$C"))
    if case.needs:
        out.check, out.excerpt = "skipped", case.needs
        return out
    folder = base / f"case-{case.number}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tmp = folder / ".tmp"
    tmp.mkdir()
    try:
        materialize(case, folder)
    except OSError as e:
        _cleanup(case, folder)
        out.check, out.excerpt = "skipped", f"cannot create the inputs here ({e})"
        return out
    inputs = inputs_of(case)
    before = snapshot(folder, inputs)
    present = {str(p.relative_to(folder)) for p in _walk(folder) if p != folder}
    cwd = os.getcwd()
    os.chdir(folder)
    saved_tmp, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = str(tmp)
    os.environ["TMPDIR"] = str(tmp)
    failures: list[tuple[str, str]] = []
    try:
        steps = [(case.argv, True)] + ([(case.then, False)] if case.then else [])
        for argv, first in steps:
            ran = invoke([a.replace("{C}", str(folder)) for a in argv], limit,
                         base / f".fd2-{case.number}")
            out.seconds += ran.seconds
            if first:
                out.exit = ran.code
            failures += check_run(case, folder, ran, argv, first)
            if ran.code != 0:
                break
    finally:
        os.chdir(cwd)
        tempfile.tempdir = saved_tmp
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        _unblock(case, folder)
    try:
        changed = _diff(before, snapshot(folder, inputs))
        if changed:
            failures.insert(0, ("input-changed", changed))
        failures += check_left(case, folder, present, ok=out.exit == 0)
        if out.exit == 0:
            failures += check_outputs(case, folder, present)
    finally:
        _cleanup(case, folder)
    order = ("unbounded", "input-changed", "traceback", "exit-", "not-one-line", "left-behind",
             "expected-exit", "no-event-array", "events-lost", "extra-rows", "no-output",
             "output-mode", "names-nothing")
    failures.sort(key=lambda f: next(k for k, o in enumerate(order) if f[0].startswith(o)))
    if failures:
        out.check, out.excerpt = failures[0]
        out.others = sorted({c for c, _ in failures[1:]} - {out.check})
    return out


def check_run(case: Case, folder: Path, ran: Ran, argv: list[str],
              first: bool) -> list[tuple[str, str]]:
    """Checks of one command's exit code and messages."""
    where = "" if first else " (the analysis of the output)"
    if ran.timed_out:
        return [("unbounded", f"still running after {ran.seconds:.1f} s{where}")]
    if ran.escaped:
        native = f" (and {len(ran.native.splitlines())} lines on file descriptor 2)" \
            if ran.native else ""
        return [("traceback", f"escaped the error boundary: {ran.escaped}{native}{where}")]
    fails = []
    err = ran.stderr.replace(str(folder), "$C")
    if ran.code not in (0, 2):
        fails.append((f"exit-{ran.code}", _line(err) + where))
    if "Traceback" in ran.stdout or "Traceback" in ran.stderr:
        fails.append(("traceback", _line(err) + where))
    if "Traceback" in ran.native or "panicked at" in ran.native:
        fails.append(("traceback", "on file descriptor 2: " + _line(ran.native) + where))
    if ran.code == 2:
        n = len(ran.stderr.splitlines()) + len(ran.native.splitlines())
        if n != 1 or not ran.stderr.endswith("\n"):
            head = next((x for x in err.splitlines() if x.strip()), "")
            fails.append(("not-one-line", f"{n} lines: {head[:120]!r} ... {_line(err)!r}"))
        elif not _names_something(ran.stderr, argv, folder):
            fails.append(("names-nothing", _line(err)))
    if first and case.expect is not None and ran.code in (0, 2) and ran.code != case.expect:
        fails.append((f"expected-exit-{case.expect}",
                      f"exit {ran.code} ({case.why}): {_line(err)}"))
    return fails


def _names_something(line: str, argv: list[str], folder: Path) -> bool:
    """Whether an error line names one of the command's paths or options."""
    if str(folder) in line or "--" in line:
        return True
    for a in argv:
        if "{C}" in a:
            base = os.path.basename(a.rstrip("/")).replace("\n", "")[:16]
            if base and base in line.replace("\\n", ""):
                return True
    return False


def check_left(case: Case, folder: Path, present: set[str], ok: bool) -> list[tuple[str, str]]:
    """No file left other than the inputs and (after a success) the outputs."""
    inputs = inputs_of(case)
    left = []
    for p in _walk(folder):
        if p == folder or (p.is_dir() and not p.is_symlink()):
            continue
        rel = str(p.relative_to(folder))
        if rel in present or any(_under(rel, i) for i in inputs):
            continue  # what was there, or inside an input (input-changed says so)
        if ok and any(_output(rel, o) for o in case.outputs):
            continue
        left.append(rel)
    if left:
        return [("left-behind", f"{len(left)} file(s): {', '.join(left[:3])}")]
    return []


def _under(rel: str, top: str) -> bool:
    return rel == top or rel.startswith(top.rstrip("/") + "/")


def _output(rel: str, out: str) -> bool:
    """Whether ``rel`` is the output ``out``, or a part of it where it is a dataset
    folder (a ``.parquet`` file under it, no hidden name on the way)."""
    out = out.rstrip("/")
    if rel == out:
        return True
    if not _under(rel, out):
        return False
    inner = rel[len(out) + 1:].split("/")
    return rel.endswith(".parquet") and not any(part.startswith(".") for part in inner)


def inputs_of(case: Case) -> list[str]:
    """What must not change: the ``in`` folder (every input lives under it, so a file
    written into an input folder shows) and the other entries that are not replaceable."""
    tops = {"in"} if any(_under(e.path, "in") for e in case.entries) else set()
    tops |= {e.path for e in case.entries
             if not _under(e.path, "in") and e.path not in case.replaceable}
    return sorted(tops)


def check_outputs(case: Case, folder: Path, present: set[str]) -> list[tuple[str, str]]:
    """After exit 0: the events of every parseable input are rows; modes follow umask."""
    fails = []
    for o in case.outputs:
        for p in _walk(folder / o):
            rel = str(p.relative_to(folder))
            if p.is_file() and not p.is_symlink() and rel not in present:
                mode = stat.S_IMODE(p.stat().st_mode)
                if mode != 0o666 & ~UMASK:
                    fails.append(("output-mode", f"{rel}: mode {mode:o}, umask {UMASK:03o}"))
                    break
    if case.rows_at is None or not case.counted:
        return fails
    lo = hi = 0
    for rel in case.counted:
        want = expected_rows((folder / rel).read_bytes())
        if want is None:
            return fails
        if want == "no-array":
            if len(case.counted) == 1:
                fails.append(("no-event-array",
                              "exit 0, but json finds no top-level traceEvents array"))
            return fails
        lo, hi = lo + want[0], hi + want[1]
    rows = written_rows(folder / case.rows_at)
    if rows is None:
        fails.append(("no-output", f"exit 0 but no Parquet at {case.rows_at}"))
    elif rows < lo:
        fails.append(("events-lost", f"{rows} rows, json counts {lo} X/i/I/C events"))
    elif rows > hi:
        fails.append(("extra-rows", f"{rows} rows, json counts at most {hi} row events"))
    return fails


def expected_rows(data: bytes) -> tuple[int, int] | str | None:
    """(lo, hi) rows a trace's bytes must convert to, "no-array" when the document has no
    event array, None when Python's json cannot parse them (or they are our export)."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return None
    if data.lstrip().startswith(b'{"neurontrace":'):
        return None  # neurontrace's own export: its view-only marks are no rows
    try:
        doc = loads(data)
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, Dups):
        arrays = doc.arrays
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        arrays = [doc["traceEvents"]]
    elif isinstance(doc, list):
        arrays = [doc]
    else:
        return "no-array"
    lo = hi = 0
    for arr in arrays:
        if not isinstance(arr, list):
            continue
        for e in arr:
            ph = e.get("ph") if isinstance(e, dict) else None
            lo += isinstance(ph, str) and ph in ROW_PHASES
            hi += not (isinstance(ph, str) and ph in NOT_ROWS)
    return lo, hi


def written_rows(path: Path) -> int | None:
    import pyarrow.parquet as pq

    files = [path] if path.is_file() else sorted(path.rglob("*.parquet")) if path.is_dir() \
        else []
    if not files:
        return None
    try:
        return sum(pq.read_metadata(f).num_rows for f in files)
    except Exception:  # noqa: BLE001 - an unreadable output is no output
        return None


def _unblock(case: Case, folder: Path) -> None:
    """Open each FIFO for writing (without blocking) and close it: a reader stuck in
    ``open`` in some thread then reads end-of-file and goes on."""
    for e in case.entries:
        if e.kind == "fifo":
            try:
                fd = os.open(folder / e.path, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass


def _cleanup(case: Case, folder: Path) -> None:
    for p in [folder, *(folder / d for d in case.readonly),
              *(folder / e.path for e in case.entries if e.mode is not None)]:
        try:
            if p.exists() and not p.is_symlink():
                os.chmod(p, 0o755 if p.is_dir() else 0o644)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------- the pool


def _worker(conn: Any, base: str, limit: float) -> None:
    """A worker process: runs the case numbers it is sent, one message per case."""
    os.setpgrp()  # killed with its children as one group when stuck
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.umask(UMASK)
    os.environ.setdefault("POLARS_MAX_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # The analyses' cache of raw conversions, exercised but kept out of the user's home
    os.environ["NEURONTRACE_CACHE"] = str(Path(base) / f"cache-{os.getpid()}")
    import neurontrace.cli.main  # noqa: F401 - imported before the first case is timed

    folder = Path(base)
    ran = False
    while True:
        numbers = conn.recv()
        if numbers is None:
            break
        for n in numbers:
            conn.send(("start", n))
            try:
                case = generate(n)
                if case.fresh and ran:  # back to the pool, for a new worker to run first
                    conn.send(("retire", None))
                    conn.close()
                    os._exit(0)
                ran = True
                outcome = run_case(case, folder, limit)
            except Exception as e:  # noqa: BLE001 - a bug of the harness: reported as such
                outcome = Outcome(n, FAMILIES[n % len(FAMILIES)], "", "harness-error",
                                  f"{type(e).__name__}: {_line(str(e))}")
            conn.send(("done", outcome))
            if outcome.check == "unbounded":  # threads of it may still run: start afresh
                conn.send(("retire", None))
                conn.close()
                os._exit(0)
        conn.send(("idle", None))
    conn.close()
    os._exit(0)  # threads stuck on a case (a FIFO) must not hold the exit


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (Linux /proc; 0 where unknown)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


@dataclass
class _Slot:
    proc: Any
    conn: Any
    chunk: list[int] = field(default_factory=list)
    current: int | None = None
    since: float = 0.0


def run_cases(numbers: list[int], jobs: int = 2, limit: float = LIMIT_S,
              progress: Callable[[int, int], None] | None = None,
              chunk: int = 25) -> list[Outcome]:
    """Run the given cases in ``jobs`` worker processes; one outcome per case. A worker
    that goes past ``limit + GRACE_S`` on a case (stuck in C code), dies, or grows past
    :data:`MEMORY_LIMIT` is killed with its children and replaced; its case fails."""
    import multiprocessing as mp
    import multiprocessing.connection

    ctx = mp.get_context("spawn")
    base = Path(tempfile.mkdtemp(prefix="neurontrace-fuzz-"))
    todo = [numbers[k:k + chunk] for k in range(0, len(numbers), chunk)]
    todo.reverse()
    results: dict[int, Outcome] = {}
    slots: list[_Slot] = []
    deaths = 0  # workers in a row that died outside a case

    def start(k: int) -> _Slot:
        parent, child = ctx.Pipe()
        folder = base / f"w{k}-{time.monotonic_ns()}"
        folder.mkdir()
        proc = ctx.Process(target=_worker, args=(child, str(folder), limit), daemon=True)
        proc.start()
        child.close()
        return _Slot(proc, parent)

    def kill(slot: _Slot, check: str, excerpt: str) -> None:
        try:
            os.killpg(slot.proc.pid, signal.SIGKILL)
        except OSError:
            slot.proc.kill()
        slot.proc.join(5)
        n = slot.current
        if n is not None:
            case = _safe_generate(n)
            results[n] = Outcome(n, case.family, case.variant, check, excerpt,
                                 time.monotonic() - slot.since, shown(case.argv, "$C"))
        nonlocal deaths
        deaths = deaths + 1 if n is None else 0
        if deaths > 3:
            raise RuntimeError(f"fuzzing workers die before running a case: {excerpt}")

    def assign(slot: _Slot) -> bool:
        if not todo:
            slot.conn.send(None)
            return False
        slot.chunk = todo.pop()
        slot.current = None
        slot.conn.send(slot.chunk)
        return True

    def replace(slot: _Slot) -> None:
        """``slot``'s worker is gone: its unfinished cases go back, a new one starts."""
        active.remove(slot)
        rest = [m for m in slot.chunk if m not in results]
        if rest:
            todo.append(rest)
        if progress:
            progress(len(results), len(numbers))
        if todo:
            new = start(len(slots))
            slots.append(new)
            active.append(new)
            assign(new)

    active: list[_Slot] = []
    try:
        for k in range(max(1, min(jobs, len(todo)))):
            s = start(k)
            slots.append(s)
            assign(s)
        active += slots
        last_poll = 0.0
        while active:
            ready = multiprocessing.connection.wait([s.conn for s in active], timeout=0.5)
            for s in list(active):
                if s.conn not in ready:
                    continue
                try:
                    kind, value = s.conn.recv()
                except (EOFError, OSError):
                    s.proc.join(1)
                    code = s.proc.exitcode
                    kill(s, "crashed", f"worker died (exit code {code}) during the case")
                    replace(s)
                    continue
                if kind == "start":
                    s.current, s.since = value, time.monotonic()
                elif kind == "done":
                    results[value.number] = value
                    s.current = None
                    if progress:
                        progress(len(results), len(numbers))
                elif kind == "idle" and not assign(s):
                    active.remove(s)
                    s.proc.join(10)
                elif kind == "retire":
                    s.proc.join(10)
                    replace(s)
            now = time.monotonic()
            if now - last_poll < 0.5:
                continue
            last_poll = now
            for s in list(active):
                over = s.current is not None and now - s.since > limit + GRACE_S
                big = _rss(s.proc.pid) > MEMORY_LIMIT
                if not (over or big):
                    continue
                if over:
                    kill(s, "unbounded", f"killed after {now - s.since:.0f} s "
                                         "(the timer could not interrupt it)")
                else:
                    kill(s, "unbounded", f"killed at over {MEMORY_LIMIT >> 30} GiB resident")
                replace(s)
    finally:
        for s in slots:
            if s.proc.is_alive():
                try:
                    os.killpg(s.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                s.proc.join(5)
        for p in base.rglob("*"):
            try:
                if p.is_dir() and not p.is_symlink():
                    os.chmod(p, 0o755)
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)
    return [results[n] for n in numbers if n in results]


def _safe_generate(n: int) -> Case:
    try:
        return generate(n)
    except Exception:  # noqa: BLE001
        return Case(n, FAMILIES[n % len(FAMILIES)], "(generator failed)")


# ----------------------------------------------------------------------------- report


def kind_of(o: Outcome) -> str:
    """A failure's kind: its check and its excerpt with paths and numbers generalised."""
    text = re.sub(r"\$C/\S*", "<path>", o.excerpt)
    text = re.sub(r"/tmp/\S*", "<path>", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+", "N", text)
    return f"[{o.check}] {text[:110]}"


def summary(outcomes: list[Outcome], seconds: float) -> str:
    lines = []
    per: dict[str, Counter[str]] = defaultdict(Counter)
    busy: Counter[str] = Counter()
    for o in outcomes:
        per[o.family]["cases"] += 1
        per[o.family]["failed" if o.failed else o.check] += 1
        busy[o.family] += o.seconds
    lines.append(f"{'family':<12} {'cases':>6} {'passed':>7} {'failed':>7} {'skipped':>8} "
                 f"{'seconds':>8}")
    total: Counter[str] = Counter()
    for fam in FAMILIES:
        if fam in per:
            c = per[fam]
            total.update(c)
            lines.append(f"{fam:<12} {c['cases']:>6} {c['ok']:>7} {c['failed']:>7} "
                         f"{c['skipped']:>8} {busy[fam]:>8.1f}")
    lines.append(f"{'total':<12} {total['cases']:>6} {total['ok']:>7} {total['failed']:>7} "
                 f"{total['skipped']:>8} {sum(busy.values()):>8.1f}   "
                 f"(wall {seconds:.0f} s; seconds: in the commands)")
    slow = sorted(outcomes, key=lambda o: -o.seconds)[:5]
    lines.append("slowest: " + ", ".join(f"#{o.number} {o.family} {o.seconds:.1f} s"
                                         for o in slow))
    skipped = Counter(o.excerpt for o in outcomes if o.check == "skipped")
    for why, n in sorted(skipped.items()):
        lines.append(f"skipped {n}: {why}")
    failed = [o for o in outcomes if o.failed]
    if failed:
        lines.append("")
        lines.append("failures (case, family, check, excerpt):")
        for o in failed:
            more = f" (+{', '.join(o.others)})" if o.others else ""
            lines.append(f"  #{o.number} {o.family} [{o.check}]{more} {o.excerpt}")
        kinds: dict[str, list[Outcome]] = defaultdict(list)
        for o in failed:
            kinds[kind_of(o)].append(o)
        lines.append("")
        lines.append("kinds (count, first case):")
        for k, os_ in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            first = os_[0]
            fams = ",".join(sorted({o.family for o in os_}))
            lines.append(f"  {len(os_):>5}  {k}  e.g. #{first.number} ({fams})")
            lines.append(f"         {first.variant[:150]}")
            lines.append(f"         {first.command[:150]} -> exit {first.exit}")
    return "\n".join(lines)


def show(number: int, folder: Path) -> str:
    """Write case ``number``'s inputs into ``folder``; the text says how to run it."""
    case = generate(number)
    folder.mkdir(parents=True, exist_ok=True)
    materialize(case, folder)
    lines = [f"case {case.describe()}", f"in {folder}:",
             "  " + shown(case.argv, str(folder))]
    if case.then:
        lines.append("  then (on exit 0): " + shown(case.then, str(folder)))
    if case.expect is not None:
        lines.append(f"expected exit {case.expect}: {case.why}")
    if case.counted:
        for rel in case.counted:
            want = expected_rows((folder / rel).read_bytes())
            lines.append(f"json's count for {rel}: {want}")
    small = [e for e in case.entries if e.kind == "file" and len(e.data) <= 300]
    for e in small:
        lines.append(f"  {e.path!r}: {e.data!r}")
    if case.needs:
        lines.append(f"(skipped in runs: {case.needs})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--family", choices=FAMILIES)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=float, default=LIMIT_S, help="seconds per case")
    ap.add_argument("--show", type=int, metavar="N",
                    help="write case N's inputs into --show-dir and print its command")
    ap.add_argument("--show-dir", type=Path)
    ap.add_argument("--case", type=int, action="append", metavar="N",
                    help="run only case N (repeatable)")
    ap.add_argument("--json", type=Path, metavar="FILE",
                    help="also write every case's outcome to FILE (JSON)")
    args = ap.parse_args(argv)
    if args.show is not None:
        folder = args.show_dir or Path(f"fuzz-case-{args.show}")
        print(show(args.show, folder.resolve()))
        return 0
    numbers = args.case or numbers_of(args.family, args.start, args.cases)
    t0 = time.monotonic()
    tty = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if tty and (done % 50 == 0 or done == total):
            print(f"\r{done}/{total} cases, {time.monotonic() - t0:.0f} s", end="",
                  file=sys.stderr, flush=True)

    outcomes = run_cases(numbers, args.jobs, args.limit, progress)
    if tty:
        print(file=sys.stderr)
    print(summary(outcomes, time.monotonic() - t0))
    if args.json:
        args.json.write_text(json.dumps([vars(o) for o in outcomes], indent=0))
    return 1 if any(o.failed for o in outcomes) or len(outcomes) != len(numbers) else 0


if __name__ == "__main__":
    sys.exit(main())
