"""Every fixture converts to a reviewed, readable golden text (tests/golden/<name>.txt).

Regenerate after an intended change: NEURONTRACE_UPDATE_GOLDEN=1 pytest tests/test_golden.py
and read the diff before committing it.
"""

from __future__ import annotations

import os

import pytest

import neurontrace

from support import KINETO, ROOT, render

GOLDEN = ROOT / "tests" / "golden"
REFUSED = {"truncated.json", "not-a-trace.json"}
CASES = sorted(
    p.name
    for p in KINETO.iterdir()
    if p.name.endswith((".json", ".json.gz")) and p.name not in REFUSED
)


@pytest.mark.parametrize("name", CASES)
def test_fixture_matches_golden(name: str) -> None:
    table = neurontrace.load(KINETO / name)
    text = render(table, limit=60)
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("NEURONTRACE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no golden output for {name}; run with NEURONTRACE_UPDATE_GOLDEN=1"
    assert text == golden.read_text()
