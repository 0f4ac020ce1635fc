"""After a capture: each run folder's traces become its event table (``neurontrace convert``).

Imported only once profiling is over: this is where pyarrow and polars come in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neurontrace.capture import manifest, neuron

#: The event table of one traced folder: a file for one trace, a dataset folder for several.
EVENTS = "events.parquet"


def candidates(folder: Path) -> list[Path]:
    """What in a run folder might be a trace: framework traces, neuron-explorer output."""
    found = neuron.framework_traces(folder)
    explorer = folder / neuron.EXPLORER_OUT
    if explorer.is_dir():
        found += sorted(p for p in explorer.iterdir() if p.is_dir())
    return found


def convert_folder(folder: Path, rank: int | None = None) -> dict[str, Any]:
    """Convert the traces of ``folder`` into ``folder/events.parquet``; record it.

    ``rank`` overrides the rank the trace gives (a user's rank folders are numbered by
    the launcher even when the program never initialised torch.distributed).

    Inputs no reader knows yet (e.g. neuron-explorer output before its reader exists) are
    listed as not converted, with the reason, rather than failing the run.
    """
    import neurontrace
    from neurontrace.errors import UnknownFormat
    from neurontrace.readers import detect

    inputs, skipped = [], []
    for path in candidates(folder):
        try:
            detect(path)
            inputs.append(path)
        except UnknownFormat as e:
            skipped.append({"path": str(path.relative_to(folder)), "reason": str(e)})
    record: dict[str, Any] = {"not_converted": skipped}
    if not inputs:
        record.update(output=None, events=0, inputs=[])
    else:
        out = folder / EVENTS
        result = neurontrace.convert(inputs if len(inputs) > 1 else inputs[0], out, rank=rank)
        record.update(
            output=EVENTS,
            events=result.rows,
            inputs=[str(p.relative_to(folder)) for p in inputs],
            repairs=dict(result.diagnostics.counts),
        )
    manifest.update(folder, converted=record)
    return record
