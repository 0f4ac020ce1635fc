"""Advice: findings in words, each with the time at stake per step and what to try.

::

    from neurontrace import analyses as A
    from neurontrace.analyses.advice import advise
    for f in advise(A.events("run.parquet")):
        print(f.severity, f.title, f.at_stake_ns, f.hint)

Each rule is one module of this package, documented with its exact condition and a
timeline; :data:`MODULES` is the registry, in the order findings of equal severity and
time are listed. Adding a rule: write its module (``RULE``, its id, and ``find``, a
function ``Facts -> list[Finding]``) and name it in :data:`MODULES`. Rules read the
analyses' results (gaps, copies, steps, ops) and the event table's ``role``,
``direction`` and ``layer`` columns, never a backend's event names; what they compute is
shared through :class:`~.base.Facts` (each analysis runs once; a caller that has a
:func:`~neurontrace.analyses.report.report` of the trace hands it to :func:`advise`, which
then computes none of its analyses again). :func:`.diff.changes`
says which findings appeared or disappeared between two runs.
"""

from __future__ import annotations

import polars as pl

from neurontrace.analyses.advice import (
    compilation,
    dominant,
    fusion,
    host_scalar,
    idle,
    outliers,
    ranks,
    sync,
)
from neurontrace.analyses.advice.base import (
    DEVICE,
    HOST,
    SEVERITIES,
    Facts,
    Finding,
    Rule,
    Severity,
    at_or_above,
    severity,
)
from neurontrace.analyses.report import Report

#: The rule modules, in order: each has ``RULE`` (its stable id) and ``find`` (a
#: :data:`~.base.Rule`: facts -> findings).
MODULES = (fusion, host_scalar, dominant, sync, idle, outliers, compilation, ranks)
#: rule id -> rule, in order.
RULES: dict[str, Rule] = {m.RULE: m.find for m in MODULES}

__all__ = [
    "DEVICE", "HOST", "MODULES", "RULES", "SEVERITIES", "Facts", "Finding", "Severity",
    "advise", "at_or_above", "severity",
]


def advise(lf: pl.LazyFrame, report: Report | None = None,
           wall_ns: int | None = None) -> list[Finding]:
    """Every rule's findings on ``lf`` that have time at stake (a condition that holds
    but costs nothing measurable is no advice): most severe first, then most time at
    stake (the high end, then the low end), then in :data:`RULES` order.

    ``report``: a :func:`~neurontrace.analyses.report.report` of ``lf`` the caller
    already has, whose analyses' results (steps, gaps, copies, ops) are read instead of
    computed again; ``wall_ns``: :func:`~neurontrace.analyses.compare.extent`'s, likewise
    (:meth:`.base.Facts.given`). The findings are the same with or without them."""
    facts = Facts.given(lf, report, wall_ns)
    found = [f for rule in RULES.values() for f in rule(facts) if f.at_stake_ns[1] > 0]
    order = {rule: i for i, rule in enumerate(RULES)}
    return sorted(found, key=lambda f: (-SEVERITIES.index(f.severity), -f.at_stake_ns[1],
                                        -f.at_stake_ns[0], order[f.rule]))
