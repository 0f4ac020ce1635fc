"""The advice rules (issue 17) on the real RMSNorm captures, the synthetic Neuron run and
synthetic tables; and their properties: no finding claims more time than the trace
holds, severities follow the time at stake, a trace without device rows gets no device
finding."""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neurontrace import analyses as A
from neurontrace import schema as S
from neurontrace.analyses.advice import SEVERITIES, Facts, Finding, advise, severity
from neurontrace.analyses.advice import fusion as fusion_rule
from neurontrace.analyses.advice.base import THRESHOLDS
from neurontrace.analyses.advice.diff import changes, key

import synthetic as Y
from support import FIXTURES

CAPTURE = FIXTURES / "capture"
CUDA = CAPTURE / "cuda"
CPU = CAPTURE / "cpu"
EPS = CAPTURE / "cuda-eps-copy"
NEURON = FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0"
RMSNORM_OPS = ("aten::mul", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul",
               "aten::mul")


@cache
def lf_of(path: Path) -> pl.LazyFrame:
    return A.events(path).collect().lazy()


@cache
def found(path: Path) -> tuple[Finding, ...]:
    return tuple(advise(lf_of(path)))


def by_rule(path: Path, rule: str) -> list[Finding]:
    return [f for f in found(path) if f.rule == rule]


def trace(folder: Path, variant: str) -> Path:
    return folder / variant / "trace.json.gz"


def per_step_device_ns(path: Path) -> float:
    """Device time per step, from ``compare``'s figures."""
    table = A.compare({"run": lf_of(path)})
    value = dict(zip(table.get_column("metric"), table.get_column("value"), strict=True))
    return value["device_ns"] / value["steps"]


# -- fusion -------------------------------------------------------------------------------

def test_naive_cuda_rmsnorm_chain_is_named_with_torch_rms_norm_and_torch_compile() -> None:
    (f,) = by_rule(trace(CUDA, "naive"), "fusion")
    assert f.ops == RMSNORM_OPS
    assert f.scope == "device"
    assert f.evidence["pattern"] == "RMSNorm"
    assert f.evidence["replacement"] == ["torch.rms_norm", "torch.compile"]
    assert "torch.rms_norm" in f.hint and "torch.compile" in f.hint
    assert "RMSNorm" in f.title
    assert f.evidence["steps"] == [1, 2, 3, 4, 5]
    assert f.evidence["idle_ns_per_step"] > 0
    assert len(f.evidence["rows"]) == 6


@pytest.mark.parametrize("fused", ["rms_norm", "compiled"])
def test_the_measured_saving_of_the_fused_run_lies_in_the_advised_range(fused: str) -> None:
    (f,) = by_rule(trace(CUDA, "naive"), "fusion")
    chain = f.evidence["chain_ns_per_step"]
    saving = per_step_device_ns(trace(CUDA, "naive")) - per_step_device_ns(trace(CUDA, fused))
    low, high = f.at_stake_ns
    assert low - 0.1 * chain <= saving <= high + 0.1 * chain, (fused, low, saving, high, chain)


def test_the_advised_range_is_no_wider_than_half_the_chain() -> None:
    (f,) = by_rule(trace(CUDA, "naive"), "fusion")
    low, high = f.at_stake_ns
    assert 0 < low < high
    assert high - low <= f.evidence["chain_ns_per_step"] / 2


def test_the_chain_time_is_the_device_time_of_its_ops() -> None:
    # the whole device time of the naive run is the chain, once a step
    (f,) = by_rule(trace(CUDA, "naive"), "fusion")
    assert f.evidence["chain_ns_per_step"] == pytest.approx(
        per_step_device_ns(trace(CUDA, "naive")), rel=0.02)


@pytest.mark.parametrize("path", [trace(CUDA, "rms_norm"), trace(CUDA, "compiled"),
                                  trace(CPU, "rms_norm"), trace(CPU, "compiled")],
                         ids=["cuda-rms_norm", "cuda-compiled", "cpu-rms_norm", "cpu-compiled"])
def test_a_fused_run_has_no_fusion_finding(path: Path) -> None:
    assert by_rule(path, "fusion") == []


def test_cpu_naive_chain_is_found_on_the_host() -> None:
    (f,) = by_rule(trace(CPU, "naive"), "fusion")
    assert f.ops == RMSNORM_OPS
    assert f.scope == "host"
    assert f.evidence["pattern"] == "RMSNorm"
    assert f.share["device"] is None


def test_a_chain_is_cut_by_an_op_that_is_not_elementwise() -> None:
    lf = _steps_table([["aten::mul", "aten::add", "aten::mm", "aten::mul", "aten::add"]] * 2)
    (f,) = [f for f in advise(lf) if f.rule == "fusion"]
    assert f.ops == ("aten::mul", "aten::add")
    assert f.evidence["chains_per_step"] == 2


def test_a_chain_missing_from_a_step_is_not_a_finding() -> None:
    lf = _steps_table([["aten::mul", "aten::add"], ["aten::mul", "aten::mm"]])
    assert [f for f in advise(lf) if f.rule == "fusion"] == []


def test_known_patterns_are_found_inside_longer_chains() -> None:
    assert fusion_rule.known(["aten::sub", "aten::pow", "aten::mean", "aten::add_",
                              "aten::rsqrt", "aten::mul", "aten::mul"]).name == "RMSNorm"
    assert fusion_rule.known(["aten::amax", "aten::sub", "aten::exp", "aten::sum",
                              "aten::div"]).name == "softmax"
    assert fusion_rule.known(["aten::mul", "aten::add"]) is None
    # a short pattern names only a chain that is exactly it
    assert fusion_rule.known(["aten::sigmoid", "aten::mul", "aten::mul"]).name == "SiLU gating"
    assert fusion_rule.known(["aten::sigmoid", "aten::mul", "aten::mul", "aten::tanh"]) is None
    assert fusion_rule.base_name("aten::mul_") == "mul"
    assert fusion_rule.base_name("aten::_to_copy") == "_to_copy"


def _chains_by_hand(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The definition of ``fusion.chains``, one member at a time: runs of consecutive
    fusable members on one (rank, lane, step), of two or more, with idle time between
    them, grouped by op sequence in order of first occurrence."""
    runs: list[list[tuple[Any, ...]]] = []
    for i, m in enumerate(rows):
        prev = rows[i - 1] if i else None
        if not fusion_rule.fusable(m[6]):
            continue
        if prev is not None and fusion_rule.fusable(prev[6]) and prev[1:3] == m[1:3] \
                and prev[7] == m[7]:
            runs[-1].append(m)
        else:
            runs.append([m])
    found: dict[tuple[str, ...], list[Any]] = {}
    for run in runs:
        idle = sum(max(b[3] - a[4], 0) for a, b in zip(run, run[1:], strict=False))
        if len(run) < 2 or idle <= 0:
            continue
        c = found.setdefault(tuple(m[6] for m in run), [[], [], set(), set(), [m[0] for m in run]])
        c[0].append([m[5] for m in run])
        c[1].append(idle)
        c[2].add((run[0][1], run[0][7]))
        c[3].add(run[0][2])
    return [(ops, *c) for ops, c in found.items()]


_MEMBER = st.tuples(st.sampled_from([0, 1]), st.sampled_from(["s7", "s8"]),
                    st.integers(0, 30), st.integers(0, 30),
                    st.sampled_from(["aten::mul", "aten::add_", "aten::mm", "aten::mean"]),
                    st.sampled_from([None, 1, 2]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_MEMBER, max_size=40))
def test_chains_are_the_runs_the_definition_gives(drawn: list[tuple[Any, ...]]) -> None:
    """Vectorised ``chains`` against the definition applied one member at a time (nulls,
    ties, overlaps, lanes and steps that change between members included)."""
    rows = [(i, rank, lane, start, start + dur, dur, op, step)
            for i, (rank, lane, start, dur, op, step) in enumerate(drawn)]
    members = pl.DataFrame(rows, orient="row", schema={
        S.ROW: pl.Int64, S.RANK: pl.Int64, "lane": pl.String, "start": pl.Int64,
        "end": pl.Int64, "dur": pl.Int64, "op": pl.String, "step": pl.Int64})
    got = [(c.ops, c.durs, c.idle, c.windows, c.lanes, c.rows)
           for c in fusion_rule.chains(members)]
    assert got == _chains_by_hand(rows)


# -- host scalar ----------------------------------------------------------------------------

def test_the_eps_copy_is_found_at_the_op_that_makes_it() -> None:
    (f,) = by_rule(trace(EPS, "eps_copied"), "host-scalar")
    assert f.ops == ("aten::to",)
    assert f.evidence["via"] == "aten::copy_"
    assert f.evidence["bytes"] == 2
    assert f.evidence["copies_per_step"] == 1
    assert f.evidence["steps"] == [1, 2, 3, 4, 5]
    # copy plus the stream synchronize the pageable copy makes, per step (measured)
    low, high = f.at_stake_ns
    assert low == high == f.evidence["copy_ns_per_step"] + f.evidence["wait_ns_per_step"]
    assert f.evidence["wait_ns_per_step"] > f.evidence["copy_ns_per_step"] > 0


def test_eps_as_a_python_float_has_no_host_scalar_finding() -> None:
    assert by_rule(trace(EPS, "eps_scalar"), "host-scalar") == []


def test_neuron_run_eps_copy_is_found_at_aten_add() -> None:
    (f,) = by_rule(NEURON, "host-scalar")
    assert f.ops == ("aten::add",)
    assert f.evidence["bytes"] == 4
    assert f.at_stake_ns == (30_000, 30_000)


# -- dominant op ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [trace(CUDA, "naive"), trace(CPU, "naive"), NEURON],
                         ids=["cuda", "cpu", "neuron"])
def test_aten_mul_dominates_the_naive_rmsnorm(path: Path) -> None:
    (f,) = by_rule(path, "dominant-op")
    assert f.ops == ("aten::mul",)
    assert f.evidence["share_of_time"] >= 0.5


def test_a_single_op_is_not_called_dominant() -> None:
    assert by_rule(trace(CUDA, "rms_norm"), "dominant-op") == []


# -- sync, idle, outliers -------------------------------------------------------------------

def test_the_synchronize_in_each_step_is_found() -> None:
    lf = _table([[("aten::mm", 5_000, 10_000, 5_000, False)]] * 3, stepped=True,
                device=True, sync=True)
    found = [f for f in advise(lf) if f.rule == "sync-in-loop"]
    # the device idles 2 µs a step while the host synchronises: the gaps analysis says
    # how much of it is the sync's (it ranks the causes)
    sync_ns = int(Facts(lf).steps.get_column("sync_ns").sum())
    assert len(found) == (1 if sync_ns else 0)
    for f in found:
        assert [(s["name"], s["per_step"]) for s in f.evidence["syncs"]] == [
            ("cudaDeviceSynchronize", 1)]
        assert f.at_stake_ns == (sync_ns // 3, sync_ns // 3)


def test_the_sync_finding_on_the_cuda_capture_is_the_sync_idle_of_its_steps() -> None:
    # torch.cuda.synchronize() in every step of the study; a finding only where the
    # device idles because of it
    steps = A.steps(lf_of(trace(CUDA, "naive")))
    idle = int(steps.get_column("sync_ns").sum()) // steps.height
    assert [f.at_stake_ns for f in by_rule(trace(CUDA, "naive"), "sync-in-loop")] == (
        [(idle, idle)] if idle else [])


@pytest.mark.parametrize("path", [trace(CUDA, "naive"), NEURON], ids=["cuda", "neuron"])
def test_the_idle_device_is_split_by_cause(path: Path) -> None:
    (f,) = by_rule(path, "launch-bound")
    causes = f.evidence["idle_ns_per_step_by_cause"]
    assert f.at_stake_ns[0] == causes["host_dispatch"] + causes["launch_latency"] > 0
    # the split is the gaps analysis's, per step
    lf = lf_of(path)
    table = A.steps(lf) if A.steps(lf).height else A.gaps(lf).devices
    windows = A.steps(lf).height or 1
    assert causes == {c: int(table.get_column(f"{c}_ns").sum()) // windows for c in causes}
    assert f.evidence["idle_share"] >= 0.3
    assert all(g["op_before"] and g["op_after"] for g in f.evidence["longest_gaps"])


def grown_most(lf: pl.LazyFrame, step: int) -> str:
    """The part of ``step`` (busy, idle by cause, host only) most above its median."""
    table = A.steps(lf)
    parts = [c for c in table.columns if c.endswith("_ns") and c not in (
        "start_ns", "wall_ns", "idle_ns")]
    row = table.filter(pl.col("step") == step).row(0, named=True)
    grown = {c: row[c] - table.get_column(c).median() for c in parts}
    return max(grown, key=lambda c: grown[c]).removesuffix("_ns")


def test_the_warm_up_step_is_an_outlier_and_said_to_be_one() -> None:
    (f,) = by_rule(trace(CUDA, "naive"), "step-outliers")
    (step,) = f.evidence["steps"]
    assert step["step"] == 1 and step["first"]
    assert step["more"][0]["part"] == grown_most(lf_of(trace(CUDA, "naive")), 1)
    assert "warm-up" in f.hint


def test_a_slow_step_that_is_not_the_first_is_not_called_a_warm_up() -> None:
    usual = [("aten::mm", 5_000, 10_000, 5_000, False)]
    slow = [("aten::mm", 400_000, 10_000, 5_000, False)]
    lf = _table([usual, usual, slow, usual], stepped=True, device=True, sync=False)
    (f,) = [f for f in advise(lf) if f.rule == "step-outliers"]
    (step,) = f.evidence["steps"]
    assert step["step"] == 3 and not step["first"]
    assert step["more"][0]["part"] == grown_most(lf, 3)
    assert step["excess_ns"] > 300_000  # the op 395 µs longer
    assert sum(m["ns"] for m in step["more"]) >= 0.9 * step["excess_ns"]
    assert "warm-up" not in f.hint
    assert f.at_stake_ns[0] == step["excess_ns"] // 4


def test_a_sync_that_leaves_no_device_idle_is_no_finding() -> None:
    # one step: the synchronize comes after the last kernel, no later work waits on it
    lf = _table([[("aten::mm", 5_000, 10_000, 5_000, False)]], stepped=True, device=True,
                sync=True)
    assert Facts(lf).steps.get_column("sync_ns").sum() == 0
    assert [f for f in advise(lf) if f.rule == "sync-in-loop"] == []


def test_a_cpu_trace_gets_no_device_finding() -> None:
    assert found(trace(CPU, "naive"))
    assert all(f.scope != "device" for f in found(trace(CPU, "naive")))


# -- properties -------------------------------------------------------------------------------

def test_severity_rises_with_the_share_of_the_step() -> None:
    shares = [0.0, 0.005, 0.01, 0.049, 0.05, 0.19, 0.2, 0.9, 3.0]
    ranks = [SEVERITIES.index(severity(s)) for s in shares]
    assert ranks == sorted(ranks)
    assert [severity(t) for _, t in THRESHOLDS] == ["high", "medium", "low"]
    assert severity(None) == "info"


OPS = ("aten::mul", "aten::add", "aten::mean", "aten::rsqrt", "aten::mm", "aten::to")


@st.composite
def runs(draw: st.DrawFn) -> dict[str, Any]:
    """A run of one or two ranks, each with 0 to 4 steps (0: no ``ProfilerStep``), whose
    steps call the same ops or each their own (then outliers and imbalance can show)."""
    call = st.tuples(st.sampled_from(OPS), st.integers(1, 50_000), st.integers(0, 50_000),
                     st.integers(0, 30_000), st.booleans())
    calls = st.lists(call, min_size=1, max_size=8)
    steps = draw(st.integers(0, 4))
    plans = []
    for _ in range(draw(st.integers(1, 2))):
        if draw(st.booleans()):
            plans.append([draw(calls)] * max(steps, 1))
        else:
            plans.append([draw(calls) for _ in range(max(steps, 1))])
    return {"stepped": steps > 0, "plans": plans, "device": draw(st.booleans()),
            "sync": draw(st.booleans())}


def _build(run: dict[str, Any]) -> pl.LazyFrame:
    """A run: on each rank, each step calls the ops of its plan (op, host ns, kernel ns,
    gap before the kernel, a tiny h2d copy or not)."""
    rows: list[dict[str, Any]] = []
    for rank, plan in enumerate(run["plans"]):
        rows += _rows(plan, run["stepped"], run["device"], run["sync"], rank=rank,
                      base=len(rows))
    return Y.table(*rows).collect().lazy()


def _steps_table(steps: list[list[str]]) -> pl.LazyFrame:
    """Steps calling the named ops, each with a 10 µs kernel 5 µs after the op."""
    return _table([[(n, 5_000, 10_000, 5_000, False) for n in names] for names in steps],
                  stepped=True, device=True, sync=False)


Plan = list[list[tuple[str, int, int, int, bool]]]


def _table(plan: Plan, stepped: bool, device: bool, sync: bool) -> pl.LazyFrame:
    return Y.table(*_rows(plan, stepped, device, sync)).collect().lazy()


def _rows(plan: Plan, stepped: bool, device: bool, sync: bool, rank: int = 0,
          base: int = 0) -> list[dict[str, Any]]:
    """The rows of :func:`_table`'s run on ``rank``, to follow ``base`` rows."""
    rows: list[dict[str, Any]] = []
    t = 1_000
    corr = 1_000 * rank
    for i, calls in enumerate(plan):
        step = i + 1 if stepped else None
        first = len(rows)
        if stepped:
            rows.append(Y.op(f"ProfilerStep#{step}", t, 0, category="user_annotation",
                             step=step))
        for name, host, kernel, gap, copy in calls:
            op_row = base + len(rows)
            rows.append(Y.op(name, t, host, step=step))
            if device and copy:
                corr += 1
                rows.append(Y.rt("cudaMemcpyAsync", t + 1, 1, category="cuda_runtime",
                                 correlation=corr, framework_row=op_row, direction="h2d",
                                 bytes=4, step=step))
                rows.append(Y.dev("Memcpy HtoD", t + host + 1, 500, category="gpu_memcpy",
                                  correlation=corr, framework_row=op_row, direction="h2d",
                                  bytes=4, track=Y.STREAM7, device=0, step=step))
            if device and kernel:
                corr += 1
                rows.append(Y.rt("cudaLaunchKernel", t + host // 2, 1, category="cuda_runtime",
                                 correlation=corr, framework_row=op_row, step=step))
                rows.append(Y.dev(f"k_{name}", t + host + gap + 600, kernel,
                                  correlation=corr, framework_row=op_row, track=Y.STREAM7,
                                  device=0, step=step))
            t += host + gap + kernel + 700
        if sync and device:  # from the last kernel's start to 2 µs after it ends
            start = t - (calls[-1][2] + 700 if calls and calls[-1][2] else 0)
            rows.append(Y.rt("cudaDeviceSynchronize", start, t + 2_000 - start,
                             category="cuda_runtime", step=step))
            t += 2_000
        if stepped:
            rows[first] = {**rows[first], S.DUR_NS: t - rows[first][S.START_NS]}
        t += 5_000
    return [{**r, S.RANK: rank} for r in rows]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_findings_never_claim_more_time_than_the_trace_holds(run: dict[str, Any]) -> None:
    lf = _build(run)
    facts = Facts(lf)
    for f in advise(lf):
        low, high = f.at_stake_ns
        assert 0 <= low <= high
        assert high * facts.windows <= facts.wall_ns * facts.ranks, f
        if f.share["device"] is not None:
            assert high * facts.windows <= facts.device_ns, f


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_severities_are_monotone_in_the_time_at_stake(run: dict[str, Any]) -> None:
    findings = advise(_build(run))
    for a in findings:
        for b in findings:
            if sum(a.at_stake_ns) > sum(b.at_stake_ns):
                assert SEVERITIES.index(a.severity) >= SEVERITIES.index(b.severity), (a, b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_a_trace_without_device_rows_gets_no_device_finding(run: dict[str, Any]) -> None:
    lf = _build({**run, "device": False})
    assert lf.filter(pl.col(S.LAYER) == S.DEVICE).collect().height == 0
    assert all(f.scope != "device" for f in advise(lf))


# -- ranks ----------------------------------------------------------------------------------

def test_the_slowest_rank_is_named_with_what_it_spends_more_on() -> None:
    usual = [("aten::mm", 5_000, 10_000, 5_000, False)]
    heavy = [("aten::mm", 5_000, 40_000, 5_000, False)]  # 30 µs more device work
    rows: list[dict[str, Any]] = []
    for rank, plan in enumerate([[usual] * 3, [usual] * 3, [heavy] * 3]):
        rows += _rows(plan, stepped=True, device=True, sync=False, rank=rank,
                      base=len(rows))
    lf = Y.table(*rows).collect().lazy()
    (f,) = [f for f in advise(lf) if f.rule == "rank-imbalance"]
    assert [r["rank"] for r in f.evidence["steps"]] == [2, 2, 2]
    assert f.evidence["steps"][0]["more"][0] == {"part": "busy", "ns": 30_000}
    assert f.at_stake_ns == (30_000, 30_000)
    assert f.title.startswith("Rank 2 is the slowest in 3 of 3 step(s), 30.0 µs over")


def test_ranks_alike_are_no_finding() -> None:
    assert by_rule(FIXTURES / "neuron" / "run_two_ranks", "rank-imbalance") == []
    usual = [("aten::mm", 5_000, 10_000, 5_000, False)]
    rows = _rows([usual] * 2, True, True, False, rank=0)
    rows += _rows([usual] * 2, True, True, False, rank=1, base=len(rows))
    assert [f for f in advise(Y.table(*rows)) if f.rule == "rank-imbalance"] == []


# -- compilation --------------------------------------------------------------------------

COMPILING = '''
import sys, torch
from torch.profiler import profile, ProfilerActivity, record_function
def f(x): return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
g = torch.compile(f, backend="eager")
with profile(activities=[ProfilerActivity.CPU]) as p:
    for i, shape in enumerate([(4, 64), (4, 64), (4, 32, 3)], 1):
        with record_function(f"ProfilerStep#{i}"):
            g(torch.randn(*shape))
p.export_chrome_trace(sys.argv[1])
'''


def test_a_compile_and_a_recompile_inside_the_steps_are_found(tmp_path: Path) -> None:
    """A real torch.compile run (the eager backend: dynamo compiles, nothing is
    generated) profiled from its first call: step 1 compiles, step 2 runs the cached
    graph, step 3 gets a tensor of another rank and recompiles."""
    pytest.importorskip("torch")
    out = tmp_path / "compiling.json"
    done = subprocess.run([sys.executable, "-c", COMPILING, str(out)], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    (f,) = [f for f in advise(A.events(out)) if f.rule == "compile-in-steps"]
    assert f.evidence["compile_ids"] == ["0/0", "0/1"]
    assert f.evidence["recompiles"] == ["0/1"]
    assert f.evidence["steps"] == [1, 3]
    assert f.at_stake_ns == (f.evidence["compile_ns"] // 3,) * 2
    assert f.scope == "host"
    # most of steps 1 and 3 is compiling
    steps = A.steps(A.events(out)).sort("step")
    walls = dict(zip(steps.get_column("step"), steps.get_column("wall_ns"), strict=True))
    for step in (1, 3):
        assert f.evidence["per_step"][str(step)] > walls[step] / 2


def test_neff_loads_inside_the_steps_are_found_and_the_warm_up_load_is_not() -> None:
    """The synthetic Neuron run: an ``nrt_load`` before the steps (300 us), one in step
    2 (800 us) and an ``nrt_load_collectives`` in step 3 (200 us), over 3 steps."""
    path = FIXTURES / "neuron" / "run_load_in_step"
    (f,) = by_rule(path, "compile-in-steps")
    assert f.evidence["steps"] == [2, 3]
    assert f.evidence["per_step"] == {"2": 800_000, "3": 200_000}
    assert f.evidence["loads"] == [
        {"name": "nrt_load", "step": 2, "dur_ns": 800_000},
        {"name": "nrt_load_collectives", "step": 3, "dur_ns": 200_000}]
    assert f.at_stake_ns == (1_000_000 // 3,) * 2
    assert f.evidence["compile_ids"] == [] and f.scope == "host"
    assert f.title.startswith("2 model/graph load(s) ran inside profiled steps (steps 2, 3)")
    assert "warm-up" in f.hint and "torch._dynamo" not in f.hint


def test_a_load_outside_the_steps_is_not_a_finding() -> None:
    """explorer_rmsnorm_vnc_0 has an nrt_load but no steps; run_two_ranks has steps and
    no load."""
    assert A.events(NEURON).filter(pl.col("role") == "load").collect().height == 1
    assert by_rule(NEURON, "compile-in-steps") == []
    assert by_rule(FIXTURES / "neuron" / "run_two_ranks", "compile-in-steps") == []


@pytest.mark.parametrize("path", [trace(CUDA, "compiled"), trace(CPU, "compiled")],
                         ids=["cuda", "cpu"])
def test_a_compiled_run_warmed_up_before_profiling_compiles_nothing_in_its_steps(
        path: Path) -> None:
    assert by_rule(path, "compile-in-steps") == []


# -- between runs -----------------------------------------------------------------------------

def test_the_fused_run_loses_the_fusion_and_dominant_op_findings() -> None:
    rows = changes(found(trace(CUDA, "naive")), found(trace(CUDA, "rms_norm")))
    by = {(r["rule"], tuple(r["ops"])): r for r in rows}
    assert by[("fusion", RMSNORM_OPS)]["change"] == "disappeared"
    assert by[("fusion", RMSNORM_OPS)]["after"] is None
    assert by[("dominant-op", ("aten::mul",))]["change"] == "disappeared"
    assert len(rows) == len({*map(key, found(trace(CUDA, "naive"))),
                             *map(key, found(trace(CUDA, "rms_norm")))})
    stake = [{"low": f.at_stake_ns[0], "high": f.at_stake_ns[1]}
             for f in found(trace(CUDA, "naive"))]
    assert changes(found(trace(CUDA, "naive")), found(trace(CUDA, "naive"))) == [
        {"rule": f.rule, "ops": list(f.ops), "change": "kept", "title": f.title,
         "severity": f.severity, "before": s, "after": s}
        for f, s in zip(found(trace(CUDA, "naive")), stake, strict=True)]
