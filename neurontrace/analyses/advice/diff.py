"""Findings between two runs: which appeared, which disappeared, which stayed (what
``compare A B`` is to show next to its figures; not wired into it yet).

A finding is the same in both runs when its rule and its ops (in order) are::

    A (naive)      fusion [mul, mean, add, rsqrt, mul, mul]   dominant-op [mul]   launch-bound
    B (rms_norm)                                                                  launch-bound
    ->             disappeared                                 disappeared        kept
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neurontrace.analyses.advice.base import Finding

APPEARED, DISAPPEARED, KEPT = "appeared", "disappeared", "kept"


def key(f: Finding) -> tuple[str, tuple[str, ...]]:
    return f.rule, f.ops


def changes(before: Sequence[Finding], after: Sequence[Finding]) -> list[dict[str, Any]]:
    """One row per finding of either run: ``rule, ops, change`` (``appeared``,
    ``disappeared``, ``kept``), ``title`` (the later run's where it has it),
    ``before`` and ``after`` (``{"low", "high"}`` ns per step, or None where absent) and
    ``severity`` (the later run's, else the earlier's); disappeared first, then
    appeared, then kept, each in the runs' order of findings."""
    a = {key(f): f for f in before}
    b = {key(f): f for f in after}
    out = []
    for change, keys in ((DISAPPEARED, [k for k in a if k not in b]),
                         (APPEARED, [k for k in b if k not in a]),
                         (KEPT, [k for k in b if k in a])):
        for k in keys:
            old, new = a.get(k), b.get(k)
            shown = new or old
            assert shown is not None
            out.append({
                "rule": k[0], "ops": list(k[1]), "change": change, "title": shown.title,
                "severity": shown.severity,
                "before": _stake(old), "after": _stake(new),
            })
    return out


def _stake(f: Finding | None) -> dict[str, int] | None:
    return None if f is None else {"low": f.at_stake_ns[0], "high": f.at_stake_ns[1]}
