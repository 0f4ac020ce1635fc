"""The Explorer reader's typed columns against the documented schema
(fixtures/neuron/neuron-explorer-schema.json, the copy of shared/docs' that the fixtures
are generated from): each column the reader reads as one type is documented with that
type in every event table that has it, departures only where listed here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from neurontrace.readers.neuron import explorer_rows as R

DOC: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent.parent / "fixtures" / "neuron"
     / "neuron-explorer-schema.json").read_text())

#: Documented types each kind of column reads as it is.
AGREES = {"integers": {"int64", "int32"}, "text": {"string"},
          "integers or text": {"int64", "int32", "string"},
          "a list of flow ids": {"list<string>"}}
#: Deliberate departures: documented as text, kept as the int64 stream number.
DEPARTURES = {("SystemProfileEvents", "framework_stream_id"): "string"}


def _documented(table: str) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in DOC["tables"][table]["fields"]}


def test_explorer_column_kinds_follow_the_documented_schema() -> None:
    checked = 0
    for name, (said, _) in R.KINDS.items():
        tables = [t for t in sorted(R.EVENT_TABLES) if name in _documented(t)]
        assert tables, f"{name} is documented in no event table"
        for table in tables:
            documented = _documented(table)[name]["type"]
            if (table, name) in DEPARTURES:
                assert documented == DEPARTURES[table, name], (table, name)
            else:
                assert documented in AGREES[said], (table, name, documented, said)
            checked += 1
    assert checked >= len(R.KINDS)


def test_explorer_required_columns_are_documented_as_required() -> None:
    for table, columns in R.REQUIRED.items():
        documented = _documented(table)
        assert all(documented[c]["required"] for c in columns), table
    assert set(R.REQUIRED) == R.EVENT_TABLES
