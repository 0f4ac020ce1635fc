"""The findings of ``neurontrace advise`` in words: one block per finding, most severe
first, as :func:`neurontrace.analyses.advice.advise` ordered them; the same blocks as the
"Findings" part of ``neurontrace report`` (:func:`part`), and the findings that appeared
or disappeared between runs under ``neurontrace compare`` (:func:`changes`).

Takes the findings as their JSON records (``Finding.record()``: what ``--json`` prints;
``advice.diff.changes``' rows for :func:`changes`), computes nothing::

    high  fusion  RMSNorm written out as 6 ops (mul, mean, add, rsqrt, mul, mul): ...
          at stake: 36.0 µs to 46.8 µs a step (20.7% of the step, 74.7% of device time)
          ops: aten::mul, aten::mean, aten::add, aten::rsqrt, aten::mul, aten::mul
          try: use torch.rms_norm (torch.nn.RMSNorm), or torch.compile the function ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neurontrace.views.terminal import duration, heading, percent

_INDENT = "        "


def at_stake(record: Mapping[str, Any]) -> str:
    """``36.0 µs to 46.8 µs a step (20.7% of the step, 74.7% of device time)``; one
    figure where the ends are equal (measured)."""
    figure = stake_range(record["at_stake_ns"])
    shares = [f"{percent(v)} of the {'step' if k == 'step' else 'device time'}"
              for k, v in record["share"].items() if v is not None]
    return f"{figure} a step" + (f" ({', '.join(shares)})" if shares else "")


def findings(records: Sequence[Mapping[str, Any]], total: int, name: str) -> list[str]:
    """``neurontrace advise``: ``records`` (the findings shown, in order) of ``total``
    found in ``name``."""
    if not total:
        return [heading(name), "", "No findings: no rule finds time at stake in this trace."]
    shown = (f"{total} finding(s)" if len(records) == total
             else f"{len(records)} of {total} findings")
    out = [heading(name) + f"  ({shown}, most severe first)"]
    for r in records:
        out.append("")
        out.extend(block(r))
    return out


def block(r: Mapping[str, Any]) -> list[str]:
    """One finding: ``severity rule: title``, then its time at stake, ops and hint."""
    out = [f"{r['severity']:<7} {r['rule']}: {r['title']}",
           f"{_INDENT}at stake: {at_stake(r)}"]
    if r["ops"]:
        out.append(f"{_INDENT}ops: {', '.join(r['ops'])}")
    out.append(f"{_INDENT}try: {r['hint']}")
    return out


def part(records: Sequence[Mapping[str, Any]], total: int) -> list[str]:
    """The "Findings" part of ``neurontrace report``: ``records`` (the most severe, in
    order) of ``total`` found, each in two of the lines ``advise`` shows (:func:`block`):
    its title and its time at stake (the report is one screen; ``advise`` adds the ops,
    and what to try)."""
    if not total:
        return [heading("Findings"), "  none: no rule finds time at stake in this trace"]
    shown = f"{total}" if len(records) == total else f"{len(records)} of {total}"
    out = [heading(f"Findings ({shown}, most severe first; neurontrace advise: the ops and "
                   "what to try)")]
    for r in records:
        out.extend("  " + line for line in block(r)[:2])
    return out


def stake_range(v: Mapping[str, int]) -> str:
    """A time at stake ``{"low", "high"}`` (ns): ``36.0 µs to 46.8 µs``, one figure where
    the ends are equal (measured)."""
    low, high = v["low"], v["high"]
    return duration(low) if low == high else f"{duration(low)} to {duration(high)}"


def change_stake(row: Mapping[str, Any]) -> str:
    """A changed finding's time at stake a step (a row of ``advice.diff.changes``): the
    earlier run's (``was 47.2 µs a step``) for one that disappeared, else the later
    run's (``47.2 µs a step``)."""
    if row["change"] == "disappeared":
        return f"was {stake_range(row['before'])} a step"
    return f"{stake_range(row['after'])} a step"


def changes(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    """Under ``neurontrace compare``: per run after the first (``names``, in order), the
    findings that disappeared and appeared against the first run (``rows``: the rows of
    ``advice.diff.changes`` with ``run``, the later run), with the time at stake per step
    before and after; kept findings are counted, not listed."""
    if len(names) < 2:
        return []
    out = [heading(f"Findings against {names[0]} (neurontrace advise on each run)")]
    for name in names[1:]:
        mine = [r for r in rows if r["run"] == name]
        n = {c: sum(r["change"] == c for r in mine) for c in ("disappeared", "appeared", "kept")}
        out.append(f"  {name}: {n['disappeared']} disappeared, {n['appeared']} appeared, "
                   f"{n['kept']} kept")
        for r in mine:
            if r["change"] == "kept":
                continue
            out.append(f"    {r['change']:<11} {r['severity']:<7} {r['rule']}: {r['title']} "
                       f"({change_stake(r)})")
    return out
