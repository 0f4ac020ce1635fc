"""Hostile input: whatever the bytes, a clean exit (0, or 2 naming the file), one line on
stderr, no traceback, no output left on failure, and the input untouched.

The command line runs in-process through click's runner with the real error boundary
(``neurontrace.cli.main.cli``), so exit codes and stderr are checked as a user sees them;
exit code 1 (a bug) fails the test with the message. Inputs are real torch traces (and
the synthetic quirk fixtures) mutated by hypothesis: truncated at any offset, bytes
flipped, a field given another type, events duplicated and reordered, huge values.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neurontrace.cli.main import cli

from fuzzing import FAMILIES, run_cases, slice_numbers
from support import FIXTURES, KINETO

TRACES = {  # name -> bytes; hypothesis draws names, so a failing case reads short
    "cpu-rmsnorm-naive": gzip.decompress((KINETO / "cpu-rmsnorm-naive.json.gz").read_bytes()),
    "capture/cuda/naive": gzip.decompress(
        (FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz").read_bytes()),
    "cuda-launch-chain": (KINETO / "cuda-launch-chain.json").read_bytes(),
}
REAL = st.sampled_from(sorted(TRACES)).map(TRACES.__getitem__)
QUIRKS = ("control-characters", "bare-na", "huge-integers", "invalid-utf8")
TRACES.update({q: (KINETO / f"{q}.json").read_bytes() for q in QUIRKS})
ANY = st.sampled_from(sorted(TRACES)).map(TRACES.__getitem__)
ROW_PHASES = ("X", "i", "I", "C")
FIELDS = ("ph", "ts", "dur", "pid", "tid", "name", "cat", "args", "id")
ODD = st.one_of(
    st.none(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                         st.integers(), max_size=2),
)
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


def convert(data: bytes, suffix: str = ".json") -> tuple[int, str, int | None]:
    """(exit code, stderr, rows written or None) of ``neurontrace convert`` on ``data``."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"trace{suffix}"
        src.write_bytes(data)
        out = Path(tmp) / "out" / "trace.parquet"
        r = CliRunner().invoke(cli, ["convert", str(src), str(out)])
        assert src.read_bytes() == data, "the input was modified"
        err = r.stderr
        assert r.exit_code in (0, 2), f"exit {r.exit_code}: {err}{r.exception!r}"
        assert "Traceback" not in err
        if r.exit_code == 2:
            assert err.count("\n") == 1 and str(src) in err, err
            assert not (out.parent.exists() and any(out.parent.iterdir())), "output left"
            return 2, err, None
        return 0, err, pq.read_metadata(out).num_rows


def events_of(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    trace = json.loads(data)
    return trace, trace["traceEvents"]


def rows_expected(events: list[dict[str, Any]]) -> int:
    return sum(1 for e in events if e.get("ph") in ROW_PHASES)


@FUZZ
@given(ANY, st.floats(0, 1))
def test_truncated_anywhere(data: bytes, at: float) -> None:
    convert(data[: int(len(data) * at)])


@FUZZ
@given(REAL, st.floats(0, 1))
def test_truncated_gzip(data: bytes, at: float) -> None:
    gz = gzip.compress(data, mtime=0)
    convert(gz[: int(len(gz) * at)], ".json.gz")


@FUZZ
@given(ANY,
       st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_bytes_flipped(data: bytes, flips: list[tuple[float, int]]) -> None:
    b = bytearray(data)
    for at, value in flips:
        b[min(int(at * len(b)), len(b) - 1)] = value
    convert(bytes(b))


@FUZZ
@given(REAL, st.data())
def test_a_field_of_another_type(data: bytes, draw: st.DataObject) -> None:
    trace, events = events_of(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        e = events[draw.draw(st.integers(0, len(events) - 1))]
        field = draw.draw(st.sampled_from(FIELDS))
        e[field] = draw.draw(st.booleans() | ODD)
    convert(json.dumps(trace).encode())


@pytest.mark.parametrize("field", ["pid", "tid"])
def test_a_boolean_pid_is_bad_input_or_kept(field: str) -> None:
    trace, events = events_of(TRACES["cuda-launch-chain"])
    events[0][field] = False
    code, err, rows = convert(json.dumps(trace).encode())
    assert code == 0 and rows == rows_expected(events), err


@FUZZ
@given(REAL, st.randoms(use_true_random=False),
       st.lists(st.floats(0, 1), max_size=20))
def test_duplicated_and_reordered_events_are_all_kept(
    data: bytes, rnd: Any, dups: list[float]
) -> None:
    trace, events = events_of(data)
    events.extend(events[int(d * (len(events) - 1))] for d in dups)
    rnd.shuffle(events)
    code, err, rows = convert(json.dumps(trace).encode())
    assert code == 0, err
    assert rows == rows_expected(events)


HUGE = st.one_of(st.integers(-(2**80), 2**80), st.sampled_from([1e308, -1e308, 2**63, -(2**63)]))


@FUZZ
@given(REAL, st.data())
def test_huge_values(data: bytes, draw: st.DataObject) -> None:
    trace, events = events_of(data)
    for _ in range(draw.draw(st.integers(1, 3))):
        e = events[draw.draw(st.integers(0, len(events) - 1))]
        e[draw.draw(st.sampled_from(("ts", "dur", "pid", "tid", "id")))] = draw.draw(HUGE)
    convert(json.dumps(trace).encode())


def test_quirks_inside_a_real_trace_keep_every_event() -> None:
    """Control characters, bare N/A, integers over 64 bits and invalid UTF-8, sprinkled
    through a real torch trace: every event converts, with each repair counted."""
    data = TRACES["cpu-rmsnorm-naive"]
    expected = rows_expected(events_of(data)[1])
    quirks = [b'"q": "a\x01b\x1b[0m"', b'"q": N/A', b'"q": 340282366920938463463374607431768211455',
              b'"q": "caf\xe9 \xff"']
    k = 0

    def quirk(m: re.Match[bytes]) -> bytes:
        nonlocal k
        k += 1
        return b'"args": {' + quirks[k % len(quirks)] + b", "

    mutated = re.sub(rb'"args": \{', quirk, data)
    assert k > 20
    code, err, rows = convert(mutated)
    assert code == 0, err
    assert rows == expected
    assert "warning(s) (see -v)" in err


def test_a_deterministic_slice_of_the_generated_cases_passes() -> None:
    """300 cases of ``tests/fuzzing.py`` (what ``make fuzz`` runs 10,000 of), spread over
    the case numbers so that every family comes alike, through the same harness: exit 0
    or 2, one line, no traceback, nothing left behind, inputs untouched, every event kept,
    bounded. Each failure is listed with its case number (``python tests/fuzzing.py --case
    N`` reruns it, ``--show N`` writes its inputs out)."""
    numbers = slice_numbers(300)
    assert {n % len(FAMILIES) for n in numbers} == set(range(len(FAMILIES)))
    outcomes = run_cases(numbers, jobs=2)
    assert [o.number for o in outcomes] == numbers
    failed = [o for o in outcomes if o.failed]
    assert not failed, f"{len(failed)} of {len(numbers)} cases failed:\n" + "\n".join(
        f"#{o.number} {o.family} [{o.check}] {o.excerpt} ({o.variant[:80]}; {o.command})"
        for o in failed)
