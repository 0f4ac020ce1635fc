"""The readers say what each row is (``role``, ``direction``); the analyses never match a
backend's names.

Kineto rows are checked against an independent classification of the raw JSON with the
standard library only (the categories and names of ``../shared/docs/formats.md`` and
of the real traces), on the fixtures and, when ``NEURONTRACE_CORPUS`` is set, on every
corpus trace; Neuron rows against the documented runtime and hardware vocabulary.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import analyses
from neurontrace import schema as S

from support import FIXTURES, KINETO, ROOT

CORPUS = Path(os.environ.get("NEURONTRACE_CORPUS", "/nonexistent"))
KINETO_TRACES = sorted(
    p for p in [*KINETO.glob("*.json"), *KINETO.glob("*.json.gz"),
                *FIXTURES.glob("capture/*/*/trace.json.gz")]
    # not JSON the standard library reads (bare NaN / N/A), or not a trace at all
    if p.name not in ("not-a-trace.json", "truncated.json", "bare-na.json")
)
CORPUS_TRACES = sorted(CORPUS.glob("*.json.gz")) if CORPUS.is_dir() else []

_DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync",
           "cuda_profiler_range", "mtia_ccp_events"}
_ARG_DIRECTIONS = {"HOST_TO_DEVICE": "h2d", "DEVICE_TO_HOST": "d2h",
                   "DEVICE_TO_DEVICE": "d2d", "PEER_TO_PEER": "p2p"}
_RUNTIME = ("cuda_runtime", "cuda_driver", "privateuse1_", "cuda_", "hip_", "xpu_", "mtia_")


def expected(ev: dict) -> tuple[str, str | None]:
    """(role, direction) of one raw Kineto event, as documented."""
    cat = ev.get("cat") if isinstance(ev.get("cat"), str) else ""
    name = ev.get("name") if isinstance(ev.get("name"), str) else ""
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    low = name.lower()
    if ev.get("ph") == "C":
        return "other", None
    if cat in _DEVICE:
        if cat == "cuda_sync" or name == "event_wait":
            return "wait", None
        # a device row whose args name a direction moves data, whatever it is called
        moved = _ARG_DIRECTIONS.get(args.get("direction"))  # type: ignore[arg-type]
        if cat in ("gpu_memcpy", "gpu_memset") or moved:
            return "transfer", moved or _named(low)
        if cat == "gpu_user_annotation":
            return "annotation", None
        if cat == "cuda_profiler_range":
            return "other", None
        return "compute", None
    if cat.startswith(_RUNTIME):
        if "synchroniz" in low or "waitevent" in low or "waitonevent" in low:
            return "sync", None
        if "memcpy" in low or (cat.startswith("privateuse1_") and "copy" in low):
            kind = {"1": "h2d", "2": "d2h", "3": "d2d"}.get(str(args.get("kind")))
            return "transfer", _named(low) or kind
        return "runtime", None
    return {"cpu_op": "operator", "user_annotation": "annotation",
            "python_function": "python"}.get(cat, "other"), None


def _named(low: str) -> str | None:
    for words, d in ((("htod", "h2d"), "h2d"), (("dtoh", "d2h"), "d2h"),
                     (("ptop", "p2p", "peer"), "p2p"), (("dtod", "d2d"), "d2d")):
        if any(w in low for w in words):
            return d
    return None


def _raw_events(path: Path) -> list[dict]:
    data = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    doc = json.loads(data.decode("utf-8", errors="replace"), strict=False)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict) and e.get("ph") not in ("M", "s", "t", "f")]


def _check_kineto(path: Path) -> None:
    want = Counter(
        (e.get("name") if isinstance(e.get("name"), str) else "", *expected(e))
        for e in _raw_events(path)
    )
    got = Counter(analyses.events(path).select("name", "role", "direction").collect().rows())
    assert got == want


@pytest.mark.parametrize("path", KINETO_TRACES, ids=lambda p: p.name)
def test_kineto_fixture_roles_match_the_documented_categories(path: Path) -> None:
    _check_kineto(path)


@pytest.mark.skipif(not CORPUS_TRACES, reason="NEURONTRACE_CORPUS not set")
@pytest.mark.parametrize("path", CORPUS_TRACES, ids=lambda p: p.name)
def test_corpus_trace_roles_match_the_documented_categories(path: Path) -> None:
    _check_kineto(path)


@pytest.mark.skipif(not (CORPUS / "mtia_inference_trace.json.gz").exists(),
                    reason="NEURONTRACE_CORPUS not set")
def test_mtia_dma_requests_take_their_direction_from_args() -> None:
    path = CORPUS / "mtia_inference_trace.json.gz"
    raw = Counter(e["args"]["direction"] for e in _raw_events(path)
                  if e.get("name") == "dma_request")
    df = analyses.events(path).filter(pl.col("name") == "dma_request").collect()
    assert set(df["role"]) == {"transfer"}
    got = Counter(df["direction"].to_list())
    assert got == {"h2d": raw["HOST_TO_DEVICE"], "d2h": raw["DEVICE_TO_HOST"]}
    assert got["h2d"] > 0 and got["d2h"] > 0


def _one_device_row(tmp_path: Path, name: str, cat: str, args: dict) -> tuple[str, str | None]:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": cat, "name": name, "pid": 17, "tid": 3672, "ts": 1, "dur": 5,
         "args": args}]}))
    (row,) = analyses.events(path).select("role", "direction").collect().rows()
    return row


@pytest.mark.parametrize(("name", "cat", "args", "want"), [
    ("dma_request", "mtia_ccp_events", {"direction": "HOST_TO_DEVICE", "size": 64},
     ("transfer", "h2d")),
    ("dma_req_v2", "mtia_ccp_events", {"direction": "DEVICE_TO_HOST"}, ("transfer", "d2h")),
    ("copy_engine", "kernel", {"direction": "DEVICE_TO_DEVICE"}, ("transfer", "d2d")),
    ("dma_request", "mtia_ccp_events", {"size": 64}, ("compute", None)),
    ("pe_exe", "mtia_ccp_events", {"direction": "SIDEWAYS"}, ("compute", None)),
])
def test_a_device_transfer_is_recognised_by_its_args_direction_not_its_name(
        tmp_path: Path, name: str, cat: str, args: dict, want: tuple[str, str | None]) -> None:
    assert _one_device_row(tmp_path, name, cat, args) == want


NEURON_ROLES = {
    "aten::add": ("operator", None), "aten::mul": ("operator", None),
    "nrt_execute": ("runtime", None), "nrt_load": ("load", None),
    "nrt_load_collectives": ("load", None),
    "kbl_exec_wait": ("sync", None), "nrt_tensor_write": ("transfer", "h2d"),
    "nc_exec_running": ("compute", None), "timestamp_sync_point": ("other", None),
    "hw_notify": ("other", None),
}
NEURON_TABLE_ROLES = {"Instruction": "compute", "DmaPacket": "transfer", "ActiveTime": "other",
                      "instruction": "compute", "dma": "transfer"}


@pytest.mark.parametrize("path", [
    FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0",
    FIXTURES / "neuron" / "system_profile_string_ids.json",
    FIXTURES / "neuron" / "device_profile_ns.json",
    FIXTURES / "neuron" / "run_two_ranks",
    FIXTURES / "neuron" / "run_load_in_step",
], ids=lambda p: p.name)
def test_neuron_reader_rows_are_classified_by_the_runtime_vocabulary(path: Path) -> None:
    df = analyses.events(path).collect()
    assert df.height and df["role"].null_count() == 0
    for row in df.iter_rows(named=True):
        if row["category"] in NEURON_TABLE_ROLES:
            assert (row["role"], row["direction"]) == (NEURON_TABLE_ROLES[row["category"]], None)
        elif row["name"].startswith("ProfilerStep#"):
            assert row["role"] == "annotation"
        else:
            assert (row["role"], row["direction"]) == NEURON_ROLES[row["name"]], row


@pytest.mark.parametrize("path", [FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0",
                                  FIXTURES / "neuron" / "run_load_in_step"],
                         ids=lambda p: p.name)
def test_a_neff_load_marked_load_changes_no_analysis_figure(path: Path) -> None:
    """Role ``load`` (``nrt_load``, ``nrt_load_collectives``) is read by compile-in-steps
    only: every analysis gives the same figures as with those rows' former role,
    ``runtime``."""
    from neurontrace.analyses import ALL, advice
    from neurontrace.views import terminal as T

    now = analyses.events(path).collect()
    assert now.filter(pl.col("role") == "load").height
    before = now.with_columns(role=pl.when(pl.col("role") == "load").then(pl.lit("runtime"))
                              .otherwise(pl.col("role"))).lazy()

    def figures(lf: pl.LazyFrame) -> dict[str, object]:
        return {
            "ops": T.records(analyses.ops(lf)),
            "device ops": T.records(analyses.ops(lf, layer="device")),
            "kernels": T.records(analyses.kernels(lf)),
            "gaps": T.gaps_json(analyses.gaps(lf)),
            "copies": T.records(analyses.copies(lf)),
            "steps": T.records(analyses.steps(lf)),
            "launches": T.records(analyses.launches(lf)),
            "ranks": T.records(analyses.breakdown(lf)),
            "report": T.report_json(analyses.report(lf, top=ALL)),
            "findings": [f.record() for f in advice.advise(lf)
                         if f.rule != "compile-in-steps"],
        }
    assert figures(now.lazy()) == figures(before)


def test_explorer_framework_rows_are_operators_for_the_analyses() -> None:
    lf = analyses.events(FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0")
    names = set(analyses.ops(lf)["name"])
    assert names == {"aten::add", "aten::mul"}


def test_a_schema_1_file_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    neurontrace.convert(KINETO / "nested-ops.json", out)
    t = pq.read_table(out)
    old = tmp_path / "old.parquet"
    meta = {**t.schema.metadata, b"neurontrace.schema_version": b"1"}
    pq.write_table(t.replace_schema_metadata(meta), old)
    r = subprocess.run([sys.executable, "-m", "cli.main", "ops", str(old)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"neurontrace: error: {old}: written by neurontrace schema version 1; convert it again"
    ]
    # convert run again over the old output writes it anew, in the current version
    neurontrace.convert(KINETO / "nested-ops.json", old)
    assert neurontrace.file_metadata(old)["schema_version"] == int(S.SCHEMA_VERSION)


_BACKEND = re.compile(r"(?i)cuda|hip[A-Z_]|\bnrt_|nc_exec|memcpy|cpu_op|kernel|mtia|kbl_")


def _code_strings(path: Path) -> list[str]:
    """String literals of a module that are not docstrings, nor torch's own host
    runtime rule (``TORCH_RUNTIME_CATEGORIES``, which the analysis may keep), nor its
    ``__all__``, nor words to the user (a hint's "one kernel", "a CUDA graph": text with
    spaces, never a name matched)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    allowed = {id(c) for n in ast.walk(tree)
               if isinstance(n, ast.Assign) and any(
                   isinstance(t, ast.Name) and t.id in ("TORCH_RUNTIME_CATEGORIES", "__all__")
                   for t in n.targets)
               for c in ast.walk(n.value)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs and id(n) not in allowed and " " not in n.value]


ANALYSES = sorted((ROOT / "neurontrace" / "analyses").rglob("*.py"))


@pytest.mark.parametrize("module", ANALYSES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_analysis_matches_a_backend_name(module: Path) -> None:
    found = [s for s in _code_strings(module) if _BACKEND.search(s)]
    assert found == []


def test_the_backend_name_check_reads_every_analysis_and_finds_a_name() -> None:
    assert {p.name for p in ANALYSES} >= {"ops.py", "compilation.py", "vocab.py"}
    assert [s for s in ["nrt_load", "one kernel"] if _BACKEND.search(s) and " " not in s] \
        == ["nrt_load"]
