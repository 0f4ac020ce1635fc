"""`neurontrace ops` agrees with torch's own key_averages() for the same run.

Each workload is profiled on the CPU with real torch; the exported trace goes through
neurontrace (read, assemble, op share) and every name's calls, Self CPU and CPU total
must equal key_averages()'s. The trace keeps nanoseconds exactly (3 decimals of µs), so
the only tolerance is torch's own float arithmetic on µs (well under 1 ns).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from neurontrace import schema as S
from neurontrace.analyses import events, ops

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402


def mlp_training() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def self_dispatch() -> None:
    # Ops that call an op of their own name (aten::div_ with a tensor divisor, reductions
    # such as aten::sum / aten::mean over all elements), next to ones that do not.
    x = torch.randn(64, 64)
    y = torch.rand(64, 64) + 1
    for _ in range(3):
        x.div_(2.0)
        x.div_(y)
        x.sum()
        x.mean()
        torch.sum(x, 0)


def nested_record_function() -> None:
    x = torch.randn(32, 32)
    with record_function("outer"):
        with record_function("inner"):
            y = x @ x
        with record_function("block"):
            with record_function("block"):  # same name, only child: merged by torch
                y = torch.relu(y)
        y = torch.nn.functional.layer_norm(y, (32,))
    y.sum()


def two_threads() -> None:
    def work() -> None:
        a = torch.randn(16, 16)
        for _ in range(3):
            a = a @ a + 1

    t = threading.Thread(target=work)
    t.start()
    work()
    t.join()


def scalar_math() -> None:
    x = torch.randn(8, 8)
    eps = 1e-6
    (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).sum().item()


WORKLOADS: dict[str, Callable[[], None]] = {
    "mlp_training": mlp_training,
    "ops_that_dispatch_to_themselves": self_dispatch,
    "nested_record_function": nested_record_function,
    "two_threads": two_threads,
    "rmsnorm_with_a_python_eps": scalar_math,
}


def profiled(work: Callable[[], None], out: Path, **kw: Any) -> Any:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, **kw) as prof:
        work()
    prof.export_chrome_trace(str(out))
    return prof


def torch_view(prof: Any) -> dict[str, tuple[int, float, float]]:
    """key_averages() as {name: (calls, self ns, total ns)}.

    torch names the frame of a module body ``file(0): `` where the exported trace says
    ``file(0): <module>``; the trace's spelling is the one neurontrace can know.
    """
    out = {}
    for e in prof.key_averages():
        key = e.key + "<module>" if e.key.endswith("(0): ") else e.key
        out[key] = (e.count, e.self_cpu_time_total * 1000, e.cpu_time_total * 1000)
    return out


def assert_agrees(prof: Any, trace: Path) -> pl.DataFrame:
    ours = ops(events(trace))
    mine = {n: (c, s, t) for n, c, s, t, _ in ours.iter_rows()}
    theirs = torch_view(prof)
    assert set(mine) == set(theirs)
    for name, (calls, self_ns, total_ns) in theirs.items():
        got = mine[name]
        assert got[0] == calls, f"{name}: calls {got[0]} != {calls}"
        assert abs(got[1] - self_ns) < 1, f"{name}: self {got[1]} ns != {self_ns:.3f}"
        assert abs(got[2] - total_ns) < 1, f"{name}: total {got[2]} ns != {total_ns:.3f}"
    return ours


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_agrees_with_key_averages(name: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    assert_agrees(profiled(WORKLOADS[name], trace), trace)


@pytest.mark.parametrize("name", ["mlp_training", "nested_record_function"])
def test_agrees_with_key_averages_under_with_stack(name: str, tmp_path: Path) -> None:
    # with_stack adds Python frames, which key_averages counts and which overlap the
    # record_function ranges partly (torch then reports negative self times, as we do).
    trace = tmp_path / "trace.json"
    ours = assert_agrees(profiled(WORKLOADS[name], trace, with_stack=True), trace)
    assert ours.height > 20  # the Python frames are there


def test_agrees_over_profiler_steps(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1)) as prof:
        for _ in range(4):
            mlp_training()
            prof.step()
    prof.export_chrome_trace(str(trace))
    ours = assert_agrees(prof, trace)
    assert ("ProfilerStep*", 3) in [(n, c) for n, c, *_ in ours.iter_rows()]


def test_the_self_dispatch_workload_really_nests_ops_in_themselves(tmp_path: Path) -> None:
    # Guards the agreement test: the merge of same-name children must be exercised, and
    # it is what makes calls fewer than spans.
    trace = tmp_path / "trace.json"
    prof = profiled(self_dispatch, trace)
    lf = events(trace)
    parents = lf.select(pl.col(S.ROW).alias(S.PARENT), pl.col(S.NAME).alias("parent_name"))
    nested = (
        lf.filter(pl.col(S.CATEGORY) == "cpu_op")
        .join(parents, on=S.PARENT)
        .filter(pl.col("parent_name") == pl.col(S.NAME))
        .group_by(S.NAME).len()
        .collect()
    )
    assert nested.height >= 1
    spans = lf.group_by(S.NAME).len().collect()
    calls = torch_view(prof)
    for name, n_nested in nested.iter_rows():
        n_spans = spans.filter(pl.col(S.NAME) == name).get_column("len").item()
        assert calls[name][0] == n_spans - n_nested
