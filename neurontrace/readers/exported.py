"""neurontrace's own Chrome-trace export (``neurontrace export``), read back exactly.

The export is Kineto-shaped JSON (see :mod:`neurontrace.views.chrome`), so the Kineto
reader reads it; this reader then restores, from the ``"neurontrace"`` key that the
export put last in each event's ``args``, every column Chrome-trace has no field for
(the real pid/tid, layer, track, nesting, links, step, rank, ...) and each row's own
``args`` text. View-only events (gap and copy marks) and the export's flow arrows are
not rows of the table and are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers.base import Events, Flows, Progress
from neurontrace.readers.kineto import KinetoReader

MARKER = "neurontrace"  # views.chrome.MARKER (readers do not import the views)
_WHOLE = '{"' + MARKER + '":'  # opens the export, and args that are only the payload
_LAST = ',"' + MARKER + '":'  # the payload after the row's own args keys
_VIEW = '{"' + MARKER + '.view":'
_DECODER = json.JSONDecoder()  # keeps integers wider than 64 bits exact


class ExportReader:
    name = "neurontrace-export"
    description = "neurontrace's own Chrome-trace export (neurontrace export), every column kept"

    def sniff(self, path: Path, head: bytes) -> bool:
        return head.lstrip().startswith(_WHOLE.encode())

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        inner = KinetoReader().read(path, diag, progress)

        def batches(ev: Events) -> Iterator[pa.RecordBatch]:
            for batch in inner.batches:
                if isinstance(batch, Flows):  # the export's arrows: not the input's
                    continue
                restored = _restore(batch, path)
                if restored.num_rows:
                    yield restored
            ev.trace = {k: v for k, v in inner.trace.items() if k != MARKER}
            ev.clock = inner.clock
            ev.rank = inner.rank

        return Events.filled_by(self.name, batches)


#: Columns the Kineto reader reads as they are; the others are restored from the payload.
_KEPT = (S.NAME, S.CATEGORY, S.KIND, S.START_NS, S.DUR_NS)
_RESTORED = pa.schema([(c.name, c.type) for c in S.COLUMNS if c.name not in _KEPT])


def _restore(batch: pa.RecordBatch, path: Path) -> pa.RecordBatch:
    view = pc.fill_null(pc.starts_with(batch.column(S.ARGS), _VIEW), True)  # or no args
    taken = batch.filter(pc.invert(view))
    payloads = [_payload(text, path) for text in taken.column(S.ARGS).to_pylist()]
    restored = pa.RecordBatch.from_pylist(payloads, schema=_RESTORED)
    cols = {name: taken.column(name) for name in _KEPT}
    cols.update((name, restored.column(name)) for name in _RESTORED.names)
    return pa.RecordBatch.from_pydict(cols)


def _payload(text: str, path: Path) -> dict[str, Any]:
    """The payload (the last key of ``text``), with the row's own ``args`` under ``args``.

    ``,"neurontrace":`` cannot occur inside a JSON string (a quote there is escaped), so
    its last occurrence is our key unless the payload holds the whole object.
    """
    if text.startswith(_WHOLE):
        at, own = len(_WHOLE), None
    else:
        cut = text.rfind(_LAST)
        if cut < 0:
            raise BadInput(f"{path}: an event's args lack the {MARKER!r} key; not an "
                           "unmodified neurontrace export (read it with --format kineto)")
        at, own = cut + len(_LAST), text[:cut] + "}"
    payload, end = _DECODER.raw_decode(text, at)
    if not isinstance(payload, dict) or text[end:] != "}":
        raise BadInput(f"{path}: an event's {MARKER!r} args key is damaged: {text[:80]!r}")
    if own is not None:
        payload[S.ARGS] = own
    return payload
