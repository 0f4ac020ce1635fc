"""What every rule shares: the :class:`Finding` it returns, the :class:`Facts` it reads
(the analyses' results, each computed once, on first use) and the one severity scale.

Time at stake is **per step**: per ``ProfilerStep#N`` of a rank (a trace without steps is
one step per rank, its whole span), so findings of runs of different lengths compare::

    step 1 |== chain ==|  ...  |  step 2 |== chain ==|  ...  |   at stake: the chain's
              41 µs                       42 µs                 saving per step, 41.5 µs

``at_stake_ns`` is ``(low, high)``: equal ends where the time is measured (a copy's
duration), a range where it is an estimate (what a fused kernel would save). ``share``:
the middle of that range over the median step's wall time (``step``) and over the device
time per step (``device``; None without device work).

**Severity** is a function of ``share["step"]`` alone, the same for every rule, so it is
monotone in the time at stake: ``high`` from 20% of the step, ``medium`` from 5%,
``low`` from 1%, ``info`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import vocab as V
from neurontrace.analyses.compare import extent
from neurontrace.analyses.copies import copies
from neurontrace.analyses.gaps import Gaps, Inputs, gaps, inputs
from neurontrace.analyses.ops import UNLINKED, device_ops, host_ops
from neurontrace.analyses.report import Report
from neurontrace.analyses.steps import steps

Severity = Literal["info", "low", "medium", "high"]
#: Severities, lowest first.
SEVERITIES: tuple[Severity, ...] = ("info", "low", "medium", "high")
#: ``(severity, least share of the step)``, highest first.
THRESHOLDS: tuple[tuple[Severity, float], ...] = (("high", 0.20), ("medium", 0.05),
                                                   ("low", 0.01))
DEVICE, HOST = "device", "host"


def severity(step_share: float | None) -> Severity:
    """The severity of a finding whose time at stake is ``step_share`` of the step."""
    for name, least in THRESHOLDS:
        if step_share is not None and step_share >= least:
            return name
    return "info"


def at_or_above(found: Severity, least: Severity) -> bool:
    return SEVERITIES.index(found) >= SEVERITIES.index(least)


@dataclass(frozen=True)
class Finding:
    """One piece of advice.

    ``rule``: the rule's stable id; ``scope``: ``device`` (about device work) or ``host``;
    ``title``: one line in plain words; ``ops``: the op names concerned (in order, for a
    chain); ``at_stake_ns``: ``(low, high)`` per step (see the module docstring);
    ``share``: ``{"step": ..., "device": ...}``; ``evidence``: where to find it (rows,
    steps, tracks, figures; JSON values); ``hint``: what to try.
    """

    rule: str
    scope: str
    severity: Severity
    title: str
    ops: tuple[str, ...]
    at_stake_ns: tuple[int, int]
    share: Mapping[str, float | None]
    evidence: Mapping[str, Any]
    hint: str

    def record(self) -> dict[str, Any]:
        """The finding as JSON values (what ``neurontrace advise --json`` prints)."""
        low, high = self.at_stake_ns
        return {
            "rule": self.rule, "scope": self.scope, "severity": self.severity,
            "title": self.title, "ops": list(self.ops),
            "at_stake_ns": {"low": low, "high": high}, "share": dict(self.share),
            "evidence": dict(self.evidence), "hint": self.hint,
        }


@dataclass
class Facts:
    """A trace's events and the analyses' results the rules read, each computed on first
    use and kept (``cached_property``), so two rules never compute one thing twice."""

    lf: pl.LazyFrame

    @classmethod
    def given(cls, lf: pl.LazyFrame, report: Report | None = None,
              wall_ns: int | None = None) -> Facts:
        """Facts of ``lf`` that take what a caller already computed instead of computing
        it again: the analyses' results a :func:`.report.report` of ``lf`` holds
        (``report.computed``: steps, gaps, copies, host and device ops) and ``wall_ns``
        (:func:`.compare.extent`'s). What is not given is computed on first use."""
        facts = cls(lf)
        done = report.computed if report is not None else None
        if done is not None:
            facts.__dict__.update(steps=done.steps, gaps=done.gaps, copies=done.copies,
                                  host_ops=done.host_ops, device_ops=done.device_ops)
        if wall_ns is not None:
            facts.__dict__["wall_ns"] = wall_ns
        return facts

    @cached_property
    def read(self) -> Inputs:
        """:func:`.gaps.inputs`, read once for :attr:`steps` and :attr:`gaps` (without
        device work, of no rows: there is no gap to explain)."""
        return inputs(self.lf if self.has_device else self.lf.clear())

    @cached_property
    def steps(self) -> pl.DataFrame:
        """:func:`.steps.steps`."""
        return steps(self.lf, self.read)

    @cached_property
    def gaps(self) -> Gaps:
        """:func:`.gaps.gaps`."""
        return gaps(self.lf, read=self.read)

    @cached_property
    def copies(self) -> pl.DataFrame:
        """:func:`.copies.copies`."""
        return copies(self.lf)

    @cached_property
    def device_ops(self) -> pl.DataFrame:
        """:func:`.ops.device_ops`."""
        return device_ops(self.lf)

    @cached_property
    def host_ops(self) -> pl.DataFrame:
        """:func:`.ops.host_ops`."""
        return host_ops(self.lf)

    @cached_property
    def wall_ns(self) -> int:
        """From the first span's start to the last span's end."""
        return extent(self.lf)[0]

    @cached_property
    def ranks(self) -> int:
        """Ranks with events (at least 1)."""
        n = self.lf.select(pl.col(S.RANK).n_unique()).collect().item()
        return max(int(n or 0), 1)

    @cached_property
    def windows(self) -> int:
        """How many steps the per-step figures divide by: ``(rank, step)`` pairs, else
        (a trace without steps) one per rank."""
        return self.steps.height or self.ranks

    @cached_property
    def step_ns(self) -> int:
        """The median step's wall time; the trace's wall time without steps."""
        if self.steps.height:
            return int(self.steps.get_column("wall_ns").median() or 0)  # type: ignore[arg-type]
        return self.wall_ns

    @cached_property
    def device_ns(self) -> int:
        """Device time of all launches (the device view's total)."""
        return int(self.device_ops.get_column("self_ns").sum())

    @cached_property
    def has_device(self) -> bool:
        """Whether the trace has device work."""
        return self.device_ops.height > 0

    @cached_property
    def launches(self) -> pl.DataFrame:
        """Device work as launches, in time order per lane: ``row, rank, lane, start,
        end, dur, op, step, framework_row``. ``lane`` is the stream or core (its track;
        one execution seen on several cores is one launch, on the track of its first start,
        the first by name on a tie);
        ``op`` the launching op's name (``(unlinked)`` without one, an annotation's name
        when an annotation launched it); ``step`` the launching op's step."""
        work = self.lf.filter(V.is_device_work() & (pl.col(S.DUR_NS) > 0)).select(
            S.ROW, S.RANK, S.TRACK, S.FRAMEWORK_ROW, S.START_NS,
            end=pl.col(S.START_NS) + pl.col(S.DUR_NS),
            _key=V.work_key(),
        )
        one = work.group_by(S.RANK, "_key").agg(
            pl.col(S.ROW).min(), pl.col(S.TRACK).sort_by(S.START_NS, S.TRACK).first().alias("lane"),
            pl.col(S.FRAMEWORK_ROW).drop_nulls().first(),
            pl.col(S.START_NS).min().alias("start"), pl.col("end").max(),
        )
        names = self.lf.filter(pl.col(S.LAYER) == S.FRAMEWORK).select(
            pl.col(S.ROW).alias(S.FRAMEWORK_ROW), V.op_name().alias("op"),
            pl.col(S.STEP).alias("step"),
        )
        return (
            one.join(names, on=S.FRAMEWORK_ROW, how="left")
            .select(S.ROW, S.RANK, "lane", "start", "end", dur=pl.col("end") - pl.col("start"),
                    op=pl.col("op").fill_null(UNLINKED), step="step",
                    framework_row=S.FRAMEWORK_ROW)
            .sort(S.RANK, "lane", "start")
            .collect()
        )

    @cached_property
    def top_ops(self) -> pl.DataFrame:
        """Host operators called directly by the user's code (no operator above them),
        in time order per thread: ``row, rank, lane, start, end, dur, op, step``."""
        ops = self.lf.filter(V.is_op())
        parents = ops.select(pl.col(S.ROW).alias(S.PARENT), _op_parent=pl.lit(True))
        return (
            ops.join(parents, on=S.PARENT, how="left")
            .filter(pl.col("_op_parent").is_null())
            .select(S.ROW, S.RANK, lane=S.TRACK, start=S.START_NS,
                    end=pl.col(S.START_NS) + pl.col(S.DUR_NS), dur=S.DUR_NS,
                    op=V.op_name(), step=S.STEP)
            .sort(S.RANK, "lane", "start")
            .collect()
        )

    def share(self, at_stake: tuple[int, int], device_time: bool) -> dict[str, float | None]:
        """``{"step": ..., "device": ...}`` for a time at stake per step; ``device`` only
        where that time is device time (``device_time``), not idle or host time."""
        mid = (at_stake[0] + at_stake[1]) / 2
        per_step_device = self.device_ns / self.windows if self.windows else 0
        return {
            "step": mid / self.step_ns if self.step_ns else None,
            "device": mid / per_step_device if per_step_device and device_time else None,
        }

    def finding(self, rule: str, scope: str, title: str, ops: Sequence[str],
                at_stake: tuple[int, int], evidence: Mapping[str, Any],
                hint: str, device_time: bool = False) -> Finding:
        """A :class:`Finding` with its share and severity filled in (``device_time``: the
        time at stake is device time, so its share of the device time is given)."""
        low, high = (max(int(at_stake[0]), 0), max(int(at_stake[1]), 0))
        low = min(low, high)
        share = self.share((low, high), device_time)
        return Finding(rule=rule, scope=scope, severity=severity(share["step"]), title=title,
                       ops=tuple(ops), at_stake_ns=(low, high), share=share,
                       evidence=evidence, hint=hint)


#: A rule: the facts of a trace -> its findings (none where the condition does not hold).
Rule = Callable[[Facts], list[Finding]]


def per_step(total_ns: float, facts: Facts) -> int:
    """A trace's total as a time per step (rounded down)."""
    return int(total_ns // facts.windows) if facts.windows else 0


def us(ns: float) -> str:
    """A time in words (for titles): ``41.5 µs``, ``2.37 ms``, ``9.787 s``."""
    if ns < 1e6:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns / 1e6:.2f} ms" if ns < 1e9 else f"{ns / 1e9:.3f} s"


def count(v: float) -> str:
    """A count per step in words: ``3``, ``0.67``, ``1.5``."""
    return f"{v:.2f}".rstrip("0").rstrip(".")
