"""Rule ``fusion``: chains of small elementwise and reduction ops that one fused kernel
would replace.

**Condition.** On one lane (a device stream or NeuronCore; on a trace without device
work, a host thread's top-level operators, each running its own CPU kernel), two or more
consecutive executions, all launched by elementwise or reduction torch ops
(:data:`ELEMENTWISE`, :data:`REDUCTIONS`), in one step, with idle time between them; the
same op sequence found in every step (on a trace without steps, at least once)::

    host    [mul][cudaLaunch] [mean][launch] [add][launch] [rsqrt].. [mul].. [mul]..
    stream      |=mul=|  gap  |=mean=|  gap  |add|  gap  |rsqrt| gap |==mul==| |==mul==|
                <------------------- one chain, every step -------------------------->

**Time at stake** (per step; a chain found k times a step counts k times), the device
time a fused kernel would save, as a range, from each member's median duration over the
chain's occurrences (a warm-up step weighs nothing), at most the chain's measured time::

    chain     |= 8.5 =|= 6.3 =|0.9|0.9|==== 19.7 ====|==== 19.3 ====|   T = 55.6 µs
    fused, worst case:  as long as the longest member         19.7  ->  save 35.9
    fused, best case:   as long as the cheapest full-size     8.5   ->  save 47.1
                        elementwise member (x * x)

- low end: ``T`` minus the chain's longest member: the fused kernel is assumed to cost
  as much as the most expensive op it replaces (it does at least that op's work);
- high end: ``T`` minus the cheapest *full-size elementwise* member: one that reads and
  writes the whole tensor, which a fused kernel must do once. A member is full-size when
  it is elementwise and lasts at least :data:`FULL_SIZE` of the longest member (shapes
  are not read; the members working on a reduction's small output, such as the
  ``add`` of ``eps`` and the ``rsqrt``, are far shorter); without one, the cheapest
  member.

Both ends assume the chain's ops are bound by memory traffic (as elementwise ops and
reductions of this size are), that the fused kernel runs on the same device at the
same bandwidth, and they count device time only: the idle gaps inside the chain
(reported, ``idle_ns_per_step``) go too when the launches do, an extra saving of wall
time not in the range.

**Known patterns** (:data:`PATTERNS`): a chain that is one of these op sequences (or, for
one of :data:`INSIDE` ops or more, holds it) is named after it, with its fused
replacement; any other chain gets ``torch.compile``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.advice.base import DEVICE, HOST, Facts, Finding, us

RULE = "fusion"

#: Torch elementwise ops (base names: ``aten::`` and an in-place ``_`` dropped).
ELEMENTWISE = frozenset({
    "mul", "add", "sub", "rsub", "div", "rsqrt", "sqrt", "pow", "square", "exp", "log",
    "neg", "reciprocal", "abs", "tanh", "sigmoid", "silu", "gelu", "relu", "erf",
    "clamp", "clamp_min", "clamp_max", "where", "maximum", "minimum", "masked_fill",
})
#: Torch reductions.
REDUCTIONS = frozenset({
    "mean", "sum", "amax", "amin", "max", "min", "var", "std", "norm",
    "linalg_vector_norm", "logsumexp",
})
#: A member lasting at least this share of the chain's longest is full-size.
FULL_SIZE = 0.25
#: Patterns of at least this many ops are named inside a longer chain too.
INSIDE = 5


@dataclass(frozen=True)
class Pattern:
    """A known chain: ``steps`` (each position's allowed base names), its ``name`` and
    what replaces it (``replacement``, ``hint``)."""

    name: str
    steps: tuple[frozenset[str], ...]
    replacement: tuple[str, ...]
    hint: str


def _seq(*names: str) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(n.split("|")) for n in names)


PATTERNS = (
    Pattern("RMSNorm", _seq("mul|pow", "mean", "add", "rsqrt", "mul", "mul"),
            ("torch.rms_norm", "torch.compile"),
            "use torch.rms_norm (torch.nn.RMSNorm), or torch.compile the function: one "
            "kernel that reads the tensor once and writes it once"),
    Pattern("LayerNorm", _seq("mean", "sub", "mul|pow", "mean", "add", "rsqrt|sqrt",
                              "mul|div", "mul", "add"),
            ("torch.nn.functional.layer_norm", "torch.compile"),
            "use torch.nn.functional.layer_norm (torch.nn.LayerNorm), or torch.compile"),
    Pattern("softmax", _seq("amax|max", "sub", "exp", "sum", "div"),
            ("torch.softmax", "torch.compile"),
            "use torch.softmax, or torch.compile"),
    Pattern("GELU (tanh)", _seq("mul", "pow", "mul", "add", "mul", "tanh", "add", "mul"),
            ("torch.nn.functional.gelu", "torch.compile"),
            "use torch.nn.functional.gelu(x, approximate='tanh'), or torch.compile"),
    Pattern("SiLU gating", _seq("sigmoid", "mul", "mul"),
            ("torch.nn.functional.silu", "torch.compile"),
            "use torch.nn.functional.silu(x) * y, or torch.compile the gated MLP"),
    Pattern("SiLU gating", _seq("silu", "mul"), ("torch.compile",),
            "torch.compile the gated MLP: silu and the product in one kernel"),
)


def base_name(op: str) -> str:
    """``aten::mul_`` -> ``mul``: the op's name without its namespace and in-place mark."""
    name = op.rsplit("::", 1)[-1]
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


def fusable(op: str) -> bool:
    b = base_name(op)
    return b in ELEMENTWISE or b in REDUCTIONS


def known(ops: Sequence[str]) -> Pattern | None:
    """The first pattern that is ``ops``, or, for a pattern of at least :data:`INSIDE`
    ops, that is found as a run of consecutive ops of ``ops`` (a short one, such as
    ``sigmoid, mul, mul``, is too common a piece of longer chains to name them)."""
    names = [base_name(o) for o in ops]
    for p in PATTERNS:
        n = len(p.steps)
        last = len(names) - n + 1 if n >= INSIDE else (1 if len(names) == n else 0)
        for i in range(last):
            if all(names[i + k] in p.steps[k] for k in range(n)):
                return p
    return None


@dataclass(frozen=True)
class _Chain:
    """Occurrences of one op sequence, in order: each one's durations (one per op) and
    idle time; the (rank, step) windows and lanes they were found in; the first one's
    rows."""

    ops: tuple[str, ...]
    durs: list[list[int]]
    idle: list[int]
    windows: set[tuple[int, int | None]]
    lanes: set[str]
    rows: list[int]


def chains(members: pl.DataFrame) -> list[_Chain]:
    """The chains of ``members`` (``row, rank, lane, start, end, dur, op, step``, sorted
    by rank, lane and start): maximal runs of consecutive fusable ops on one lane in one
    step, of two or more, with idle time between them; grouped by op sequence (in the
    order each sequence first occurs)::

        members   mul  mean  add  mm  mul  mul | mul     (| : another lane or step)
        fusable    y    y     y   n    y    y     y
        run        1    1     1   2    3    3     4
        chains     [mul mean add]     [mul mul]          (if idle between members)

    Whole-column operations: a loop over every member in Python was a fifth of
    ``report`` on a device-heavy trace.
    """
    fused = [op for op in members.get_column("op").unique().to_list() if fusable(op)]
    good = pl.col("op").is_in(pl.Series(fused, dtype=pl.String).implode())
    # a member continues the run of the one before it: both fusable, same lane and step
    goes_on = pl.col("good") & pl.col("good").shift(fill_value=False) & pl.all_horizontal(
        pl.col(c).eq_missing(pl.col(c).shift()) for c in (S.RANK, "lane", "step"))
    runs = (
        members.lazy()
        .with_columns(good=good.fill_null(False))
        .with_columns(run=(~goes_on).cum_sum(), idle=pl.when(goes_on).then(
            (pl.col("start") - pl.col("end").shift()).clip(lower_bound=0)).otherwise(0))
        .filter("good")
        .group_by("run", maintain_order=True)
        .agg("op", "dur", S.ROW, pl.col("idle").sum(), pl.first(S.RANK), pl.first("lane"),
             pl.first("step"))
        .filter((pl.col("op").list.len() >= 2) & (pl.col("idle") > 0))
        .group_by("op", maintain_order=True)
        .agg("dur", "idle", S.RANK, "step", "lane", pl.first(S.ROW))
        .collect()
    )
    return [_Chain(ops=tuple(ops), durs=durs, idle=idle,
                   windows=set(zip(ranks, steps, strict=True)),
                   lanes={str(lane) for lane in lanes}, rows=rows)
            for ops, durs, idle, ranks, steps, lanes, rows in runs.iter_rows()]


def find(facts: Facts) -> list[Finding]:
    scope = DEVICE if facts.has_device else HOST
    members = facts.launches if facts.has_device else facts.top_ops
    stepped = facts.steps.height > 0
    if stepped:
        members = members.filter(pl.col("step").is_not_null())
    every = {(int(r), int(s)) for r, s in facts.steps.select(S.RANK, "step").iter_rows()}
    out = []
    for c in chains(members):
        if stepped and not every <= c.windows:
            continue  # not in every step
        out.append(_finding(facts, c, scope))
    return out


def _finding(facts: Facts, c: _Chain, scope: str) -> Finding:
    n = len(c.durs)
    per_step = n / facts.windows
    means = [float(statistics.median(d[i] for d in c.durs)) for i in range(len(c.ops))]
    total, longest = sum(means), max(means)
    full = [m for op, m in zip(c.ops, means, strict=True)
            if base_name(op) in ELEMENTWISE and m >= FULL_SIZE * longest]
    cheapest = min(full) if full else min(means)
    measured = sum(sum(d) for d in c.durs) / facts.windows  # never more than the chain took
    at_stake = (int(min((total - longest) * per_step, measured)),
                int(min((total - cheapest) * per_step, measured)))
    pattern = known(c.ops)
    where = "on the device" if scope == DEVICE else "on the host"
    short = ", ".join(base_name(o) for o in c.ops)
    if pattern and len(pattern.steps) == len(c.ops):
        what = f"{pattern.name} written out as {len(c.ops)} ops"
    else:
        what = f"{len(c.ops)} elementwise/reduction ops in a row" + (
            f", a {pattern.name} among them" if pattern else "")
    title = (f"{what} ({short}): {us(total * per_step)} {where} a step, "
             f"a fused kernel would save {us(at_stake[0])} to {us(at_stake[1])}")
    hint = (pattern.hint if pattern else
            "torch.compile the code that runs these ops: it fuses them into one kernel")
    evidence = {
        "pattern": pattern.name if pattern else None,
        "replacement": list(pattern.replacement) if pattern else ["torch.compile"],
        "chain_ns_per_step": int(total * per_step),
        "idle_ns_per_step": int(sum(c.idle) / n * per_step),
        "chains_per_step": per_step,
        "members": [{"op": op, "median_ns": int(m),
                     "full_size": base_name(op) in ELEMENTWISE and m >= FULL_SIZE * longest}
                    for op, m in zip(c.ops, means, strict=True)],
        "steps": sorted(s for _, s in c.windows if s is not None),
        "lanes": sorted(c.lanes),
        "rows": c.rows,
    }
    return facts.finding(RULE, scope, title, c.ops, at_stake, evidence, hint,
                         device_time=scope == DEVICE)
