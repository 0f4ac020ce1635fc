"""The findings of ``neurontrace advise`` in words: one block per finding, most severe
first, as :func:`neurontrace.analyses.advice.advise` ordered them.

Takes the findings as their JSON records (``Finding.record()``: what ``--json`` prints),
computes nothing::

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
    low, high = record["at_stake_ns"]["low"], record["at_stake_ns"]["high"]
    figure = duration(low) if low == high else f"{duration(low)} to {duration(high)}"
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
        out.append(f"{r['severity']:<7} {r['rule']}: {r['title']}")
        out.append(f"{_INDENT}at stake: {at_stake(r)}")
        if r["ops"]:
            out.append(f"{_INDENT}ops: {', '.join(r['ops'])}")
        out.append(f"{_INDENT}try: {r['hint']}")
    return out
