"""``neurontrace advise``: what to change, with the time at stake per step."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace.analyses import advice
from neurontrace.cli.options import (
    events,
    filter_options,
    json_option,
    path_argument,
    rows_shown,
    top_option,
    verbose_option,
)
from neurontrace.views import findings as F
from neurontrace.views import terminal as T

#: Exit code when a finding at or above ``--fail-on`` exists (2 stays bad input).
FAILED = 3


@click.command()
@path_argument
@filter_options
@top_option(10)
@json_option
@click.option("--fail-on", type=click.Choice(advice.SEVERITIES), default=None,
              help="Exit with 3 when a finding of this severity or above exists (for CI).")
@verbose_option
@click.pass_context
def advise(ctx: click.Context, path: Path, top: int, as_json: bool,
           fail_on: str | None) -> None:
    """Findings in PATH (a trace, a run folder, or what convert wrote): what to change,
    and the time it would save per step.

    Rules: fusion (chains of small elementwise/reduction ops, RMSNorm and other known
    patterns named), host-scalar (a tiny host value copied to the device every step),
    dominant-op, sync-in-loop, launch-bound (device idle waiting for the host, by cause),
    step-outliers, compile-in-steps (torch.compile compiling inside the steps),
    rank-imbalance (the slowest rank of a run of several). Each
    finding has a severity (info, low, medium, high: from its share of the median
    step), the time at stake per step (a range where it is an estimate), the ops
    concerned and what to try. --json prints [{rule, scope, severity, title, ops,
    at_stake_ns: {low, high}, share, evidence, hint}], every finding unless --top is
    given. --fail-on SEVERITY exits with 3 when a finding at or above it exists.
    """
    found = advice.advise(events(path))
    records = [f.record() for f in found]
    n = rows_shown(top, as_json)
    shown = records[:n] if n else records
    if as_json:
        T.emit_json(shown)
    else:
        T.show(F.findings(shown, len(records), str(path)))
    if fail_on is not None and any(advice.at_or_above(f.severity, fail_on)  # type: ignore[arg-type]
                                   for f in found):
        ctx.exit(FAILED)
