"""Findings between two runs: which appeared, which disappeared, which stayed (what
``compare A B`` shows under its figures).

A finding is the same in both runs when its rule and its ops (in order) are, except for
the rules of :data:`OPS_ARE_EVIDENCE`, whose ops only say where to look (one such finding
per run at most; it is the same finding whatever its ops)::

    A (naive)     fusion [mul, mean, add, rsqrt, mul, mul]  dominant-op [mul]  launch-bound [mul]
    B (rms_norm)                                                             launch-bound [rms]
    ->            disappeared                               disappeared      kept
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neurontrace.analyses.advice import idle
from neurontrace.analyses.advice.base import Finding

APPEARED, DISAPPEARED, KEPT = "appeared", "disappeared", "kept"
#: Rules whose ops are evidence (``launch-bound``: the ops around the longest gaps), not
#: what the finding is about.
OPS_ARE_EVIDENCE = frozenset({idle.RULE})


def key(f: Finding) -> tuple[str, tuple[str, ...]]:
    """What makes two runs' findings the same: the rule and its ops (in order), the rule
    alone for :data:`OPS_ARE_EVIDENCE`."""
    return f.rule, () if f.rule in OPS_ARE_EVIDENCE else f.ops


def changes(before: Sequence[Finding], after: Sequence[Finding]) -> list[dict[str, Any]]:
    """One row per finding of either run: ``rule, ops, change`` (``appeared``,
    ``disappeared``, ``kept``), ``title`` and ``ops`` (the later run's where it has it),
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
                "rule": k[0], "ops": list(shown.ops), "change": change, "title": shown.title,
                "severity": shown.severity,
                "before": _stake(old), "after": _stake(new),
            })
    return out


def against_first(found: Mapping[str, Sequence[Finding]]) -> list[dict[str, Any]]:
    """Each later run's findings against the first run's (``found``: each run's
    findings, runs in order): the rows of :func:`changes` with ``run`` (the later run)
    and ``against`` (the first), runs in order; none for fewer than two runs."""
    if len(found) < 2:
        return []
    first, *rest = found
    return [{"run": label, "against": first, **row}
            for label in rest for row in changes(found[first], found[label])]


def _stake(f: Finding | None) -> dict[str, int] | None:
    return None if f is None else {"low": f.at_stake_ns[0], "high": f.at_stake_ns[1]}
